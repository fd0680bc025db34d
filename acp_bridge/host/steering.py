"""Steering through the host (issue 24): a client's steer becomes a durable steer of the
conversation, whichever agent the conversation runs.

Two ways in, one path:

* ``_acp_bridge/send`` with ``steer: true`` (the ``send --steer`` verb). The answer says what
  happened: ``{"seq", "steered": {"into", "outcome"}}``, ``{"seq", "queued": {"reason"}}``,
  ``{"seq", "failed": {"error", "recoverable"}}`` (the agent never answered: the message is not
  sent again by itself), or ``{"seq", "pending": true}`` when the outcome did not come within
  the host's bound (it is still settled in the conversation, and logged).
* the agent's steering method called on the host by an ACP client: the extension's
  ``_session/steering`` (claude-agent-acp, codex-acp) or the draft's ``session/inject``. The host
  advertises ``_meta.steering.supported: true`` on its ``initialize`` answer, whatever agents
  its conversations run, and never passes these calls to the agent raw: each is committed
  through the conversation (``Conversation.send(steer=True)``), so it is logged, reaches the
  agent exactly once, and falls back to the head of the queue where the agent cannot take it.

The outcome a client is told (the extension's outcomes; ``_meta.acpBridge`` says more:
``seq``, and ``steeredInto`` or ``queued.reason``):

* steered: the agent's own outcome (``injected``; an outcome we do not know is passed on);
* queued at the head of the queue (the agent lacks steering, restarts, the turn is being
  cancelled or just ended, the agent answered ``failed`` or ``promptRequired``):
  ``startedNewTurn``, ``reason`` the fallback's. The message is the conversation's next turn
  and the host prompts it itself: ``failed`` or ``promptRequired`` would invite the client to
  send it again, and it would reach the agent twice;
* no turn runs and the client opted in to ``idleBehavior: "promptRequired"``:
  ``promptRequired``, ``reason: "noRunningTurn"``, as the extension defines, with nothing
  committed: the client prompts it if it wants;
* no answer from the agent (the steer is failed, recoverable, never resent by itself), or none
  within the host's bound: ``unconfirmed``, an outcome clients do not know, which the extension
  says to read as taken: it must not be sent again.

Order: the steers of one conversation sent through the host take turns (one lock per
conversation, fair): each waits for the previous one's outcome before it is committed, so two
clients steering one turn both reach the agent, in order, each into the turn if it still runs
(the conversation would otherwise send the second to the queue: one steer in flight at a time).
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import anyio

from acp_bridge.client.steering import INJECT_METHOD, STEER_METHOD
from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.steers import SteerResult
from acp_bridge.core.condition import Condition
from acp_bridge.errors import RpcError
from acp_bridge.host.clients import Client
from acp_bridge.host.conversations import ConversationHub

__all__ = ["RESULT_MARGIN_S", "client_answer", "send_answer", "steering_requests", "wait_entered"]

RESULT_MARGIN_S: Final = 5.0
"""On top of the conversation's steer answer timeout: how long the host waits for a steer's
outcome before it answers ``pending``/``unconfirmed``."""
_INVALID_PARAMS: Final = -32602
_SEND: Final = "_acp_bridge/send"

Handler = Callable[[Any], Awaitable[Any]]


class ConversationEntry(Protocol):
    """What steering needs of a conversation a connection reaches (acp_server's entry)."""

    @property
    def hub(self) -> ConversationHub: ...

    async def open(self) -> Conversation: ...


class _Line:
    """The host steers of one conversation, taking turns (a fair lock)."""

    def __init__(self) -> None:
        self.lock = anyio.Lock()
        self.entered = 0
        """Steers holding the lock or waiting for it."""
        self.changed = Condition()


_lines: weakref.WeakKeyDictionary[Conversation, _Line] = weakref.WeakKeyDictionary()
"""One line per open conversation (see the module's text)."""


def steering_requests(
    client: Client,
    find: Callable[[Any, str], ConversationEntry],
    base: dict[str, Handler],
) -> dict[str, Handler]:
    """The handlers steering adds or wraps, for ``client``: ``initialize`` (advertising),
    ``_acp_bridge/send`` (``steer: true``), ``_session/steering`` and ``session/inject``.
    ``find(params, key)`` reads and checks the conversation id; ``base`` are the other
    handlers (the ones wrapped are called for what is not steering)."""
    steering = _Steering(client, find, base)
    return {
        "initialize": steering.initialize,
        _SEND: steering.send,
        STEER_METHOD: steering.steer,
        INJECT_METHOD: steering.inject,
    }


class _Steering:
    def __init__(
        self,
        client: Client,
        find: Callable[[Any, str], ConversationEntry],
        base: dict[str, Handler],
    ) -> None:
        self.client = client
        self._find = find
        self._initialize = base["initialize"]
        self._send = base[_SEND]

    async def initialize(self, params: Any) -> Any:
        answer = await self._initialize(params)
        if isinstance(answer, dict):
            meta = answer.setdefault("_meta", {})
            if isinstance(meta, dict):
                meta["steering"] = {"supported": True}
        return answer

    async def send(self, params: Any) -> Any:
        """``_acp_bridge/send``: with ``steer``, steered and answered with its outcome."""
        params = _dict(params)
        if not params.get("steer"):
            return await self._send(params)
        if params.get("interrupt"):
            raise RpcError(_INVALID_PARAMS, "_acp_bridge/send takes interrupt or steer, not both")
        entry = self._find(params, "conversationId")
        content = params.get("content")
        if not isinstance(content, list) or not content:
            raise RpcError(_INVALID_PARAMS, "_acp_bridge/send needs a non-empty content list")
        label = params.get("label")
        seq, result = await self._steer(
            entry, content, label if isinstance(label, str) and label else None
        )
        return {"seq": seq, **send_answer(result)}

    async def steer(self, params: Any) -> dict[str, Any]:
        """``_session/steering`` (the extension)."""
        params = _dict(params)
        entry = self._find(params, "sessionId")
        content = params.get("prompt")
        if not isinstance(content, list) or not content:
            raise RpcError(_INVALID_PARAMS, f"{STEER_METHOD} needs a non-empty prompt")
        conversation = await entry.open()
        if _idle_behavior(params) == "promptRequired" and conversation.queue.running is None:
            return {"outcome": "promptRequired", "reason": "noRunningTurn"}
        seq, result = await self._steer(entry, content, None)
        return client_answer(seq, result)

    async def inject(self, params: Any) -> dict[str, Any]:
        """``session/inject`` (the draft): mode ``steer`` is a steer, mode ``queue`` a plain
        send to the back of the queue."""
        params = _dict(params)
        mode = params.get("mode", "steer")
        if mode == "steer":
            return await self.steer(params)
        if mode != "queue":
            raise RpcError(_INVALID_PARAMS, f"{INJECT_METHOD}: unknown mode {mode!r}")
        entry = self._find(params, "sessionId")
        content = params.get("prompt")
        if not isinstance(content, list) or not content:
            raise RpcError(_INVALID_PARAMS, f"{INJECT_METHOD} needs a non-empty prompt")
        await entry.open()
        seq = await entry.hub.send(content, client=self.client, label=None)
        return {"outcome": "queued", "_meta": {"acpBridge": {"seq": seq}}}

    async def _steer(
        self, entry: ConversationEntry, content: list[Any], label: str | None
    ) -> tuple[int, SteerResult | None]:
        """Commit a steer through the conversation (after the previous host steer of it
        settled) and wait, bounded, for its outcome (None: not within the bound)."""
        conversation = await entry.open()
        line = _lines.get(conversation)
        if line is None:
            line = _lines[conversation] = _Line()
        bound = conversation.steer_timeout_s + RESULT_MARGIN_S
        line.entered += 1
        line.changed.notify_all()
        try:
            async with line.lock:
                seq = await entry.hub.send(content, client=self.client, label=label, steer=True)
                with anyio.move_on_after(bound):
                    return seq, await conversation.steer_result(seq)
            return seq, None
        finally:
            line.entered -= 1
            line.changed.notify_all()


def send_answer(result: SteerResult | None) -> dict[str, Any]:
    """What ``_acp_bridge/send`` adds to ``seq`` for a steer that ended as ``result``."""
    if result is None:
        return {"pending": True}
    if result.kind == "steered":
        return {"steered": {"into": result.into, "outcome": result.outcome or "injected"}}
    if result.kind == "queued":
        queued: dict[str, Any] = {"reason": result.reason}
        if result.outcome is not None:
            queued["outcome"] = result.outcome
        return {"queued": queued}
    return {"failed": {"error": result.reason, "recoverable": True}}


def client_answer(seq: int, result: SteerResult | None) -> dict[str, Any]:
    """The steering method's answer to a client (see the module's text)."""
    ours: dict[str, Any] = {"seq": seq}
    if result is not None and result.kind == "steered":
        ours["steeredInto"] = result.into
        answer: dict[str, Any] = {"outcome": result.outcome or "injected"}
    elif result is not None and result.kind == "queued":
        ours["queued"] = {"reason": result.reason}
        answer = {"outcome": "startedNewTurn", "reason": result.reason}
    else:
        reason = "noAnswer" if result is None else "agentDidNotAnswer"
        answer = {"outcome": "unconfirmed", "reason": reason}
    answer["_meta"] = {"acpBridge": ours}
    return answer


def _idle_behavior(params: dict[str, Any]) -> Any:
    meta = params.get("_meta")
    steering = meta.get("steering") if isinstance(meta, dict) else None
    if isinstance(steering, dict) and "idleBehavior" in steering:
        return steering["idleBehavior"]
    return params.get("idleBehavior")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


async def wait_entered(conversation: Conversation, count: int) -> None:
    """Wait until ``count`` host steers of ``conversation`` are in flight or waiting for their
    turn (for tests)."""
    line = _lines.get(conversation)
    if line is None:
        line = _lines[conversation] = _Line()
    while line.entered < count:
        await line.changed.wait()
