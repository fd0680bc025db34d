"""Per-session prompt queue and cancel grace for the proxy. Pure: time comes in.

Each session has at most one ``session/prompt`` in flight at the agent; a prompt the editor
sends meanwhile waits in the session's FIFO and is forwarded when the turn in flight is
answered (``queueing=False`` forwards every prompt at once, as the editor sent it). Each turn
in flight has a :class:`~acp_bridge.core.turn_machine.TurnMachine`, which owns the cancel
grace: the editor's ``session/cancel`` passes through to the agent and arms the window; if the
agent has not answered when it expires, the bridge answers the editor ``cancelled`` itself and
the agent is quarantined (replaced, the session restored before the next prompt).

Decisions (documented in docs/proxy.md):

* ``session/cancel`` also answers ``cancelled`` every prompt queued behind the turn at that
  moment: the editor cancelled the session's pending work (claude-agent-acp does the same for
  the prompts it queues).
* A prompt sent during the grace window waits; it runs after the agent's answer, or is answered
  ``cancelled`` too if the window expires (the agent is being replaced under it).
* A turn cut by the agent's exit is not re-sent; the prompts queued behind it are forwarded once
  the session is restored (they never reached the agent). So is a prompt whose write the agent
  refused (its stdin closed): it goes back to the head of its queue (:meth:`PromptTurns.unsend`).

Bounds: ``max_queued`` prompts per session, and ``max_queued_bytes`` bytes of prompts queued
in all sessions together (the proxy's ``--max-buffer-bytes``): a prompt is queued while fewer
bytes wait, so one prompt of any size always fits and at most the bound plus one prompt waits.
One more is refused with an error response, never waited for: holding it would stop the proxy
from reading the editor, and so from reading the ``session/cancel`` that could end the turn it
waits behind.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from acp_bridge.core.turn_machine import (
    EndedBy,
    PromptAnswered,
    PromptFailed,
    PromptSent,
    Quarantine,
    Tick,
    TurnCancelRequested,
    TurnMachine,
    TurnState,
    TurnTimings,
)
from acp_bridge.proxy.frames import IdKey, id_key

__all__ = [
    "AnswerCancelled",
    "ArmGraceTimer",
    "ForwardPrompt",
    "PromptTurns",
    "QuarantineAgent",
    "QueuedPrompt",
    "RefuseQueueFull",
    "TurnsAction",
]

MAX_QUEUED = 64
MAX_QUEUED_BYTES = 32 * 1024 * 1024
"""The default byte bound (the proxy passes its ``--max-buffer-bytes``)."""
QUEUE_FULL = "too many prompts queued for this session"


@dataclass(frozen=True, slots=True)
class QueuedPrompt:
    session_id: str
    id: Any
    line: bytes
    """The editor's request as it came, forwarded unchanged."""

    @property
    def key(self) -> IdKey:
        return id_key(self.id)


@dataclass(frozen=True, slots=True)
class ForwardPrompt:
    prompt: QueuedPrompt


@dataclass(frozen=True, slots=True)
class AnswerCancelled:
    """Answer the editor ``{"stopReason": "cancelled"}`` for this prompt, now."""

    prompt: QueuedPrompt


@dataclass(frozen=True, slots=True)
class ArmGraceTimer:
    session_id: str
    deadline: float


@dataclass(frozen=True, slots=True)
class QuarantineAgent:
    session_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class RefuseQueueFull:
    prompt: QueuedPrompt
    message: str = QUEUE_FULL
    """Why, for the editor's error answer."""


TurnsAction = ForwardPrompt | AnswerCancelled | ArmGraceTimer | QuarantineAgent | RefuseQueueFull


@dataclass
class _Session:
    in_flight: dict[IdKey, tuple[QueuedPrompt, TurnMachine]] = field(default_factory=dict)
    queue: deque[QueuedPrompt] = field(default_factory=deque)


class PromptTurns:
    def __init__(
        self,
        grace_s: float,
        *,
        queueing: bool = True,
        max_queued: int = MAX_QUEUED,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        self._timings = TurnTimings(cancel_grace_s=grace_s)
        self._queueing = queueing
        self._max_queued = max_queued
        self._max_queued_bytes = max_queued_bytes
        self._queued_bytes = 0  # of the prompts in every session's queue
        self._sessions: dict[str, _Session] = {}

    def is_busy(self, session_id: str) -> bool:
        session = self._sessions.get(session_id)
        return session is not None and bool(session.in_flight)

    def holds(self, key: IdKey) -> bool:
        """A prompt with this id is in flight or queued."""
        return any(
            key in session.in_flight or any(p.key == key for p in session.queue)
            for session in self._sessions.values()
        )

    def queued(self, session_id: str) -> int:
        session = self._sessions.get(session_id)
        return 0 if session is None else len(session.queue)

    @property
    def queued_bytes(self) -> int:
        """The bytes of every queued prompt's line, in all sessions."""
        return self._queued_bytes

    def prompt(self, prompt: QueuedPrompt, now: float) -> list[TurnsAction]:
        """The editor sent ``session/prompt``."""
        session = self._sessions.setdefault(prompt.session_id, _Session())
        if self._queueing and (session.in_flight or session.queue):
            # Behind the turn in flight, and behind prompts waiting for a restore to resume
            # them (cut, or sent back by unsend): never ahead of them.
            if len(session.queue) >= self._max_queued:
                return [RefuseQueueFull(prompt)]
            if self._queued_bytes >= self._max_queued_bytes:
                return [RefuseQueueFull(prompt, self._bytes_full())]
            self._push(session, prompt)
            return []
        actions: list[TurnsAction] = []
        while session.queue:  # no queueing: what waits for a restore goes first
            waiting = self._pop(session)
            session.in_flight[waiting.key] = (waiting, self._forwarded(now))
            actions.append(ForwardPrompt(waiting))
        session.in_flight[prompt.key] = (prompt, self._forwarded(now))
        return [*actions, ForwardPrompt(prompt)]

    def answered(
        self, session_id: str, key: IdKey, stop_reason: str | None, now: float
    ) -> list[TurnsAction]:
        """The agent answered a prompt (``stop_reason`` None: with an error). The answer
        itself is forwarded by the caller; this says what to forward next."""
        session = self._sessions.get(session_id)
        if session is None or key not in session.in_flight:
            return []
        _prompt, machine = session.in_flight.pop(key)
        if stop_reason is None:
            machine.handle(PromptFailed("the agent answered with an error", recoverable=True))
        else:
            machine.handle(PromptAnswered(stop_reason))
        return self._next(session_id, session, now)

    def cancel(self, session_id: str, now: float) -> list[TurnsAction]:
        """The editor sent ``session/cancel`` (it is forwarded to the agent as it is)."""
        session = self._sessions.get(session_id)
        if session is None:
            return []
        actions: list[TurnsAction] = [AnswerCancelled(p) for p in self._drop_queue(session)]
        for _prompt, machine in session.in_flight.values():
            if machine.state is TurnState.PROMPTING:
                machine.handle(TurnCancelRequested(EndedBy.EDITOR, now))
                deadline = machine.next_deadline()
                assert deadline is not None
                actions.append(ArmGraceTimer(session_id, deadline))
        return actions

    def tick(self, session_id: str, now: float) -> list[TurnsAction]:
        """A grace timer of ``session_id`` fired."""
        session = self._sessions.get(session_id)
        if session is None:
            return []
        reason = None
        for _prompt, machine in session.in_flight.values():
            for action in machine.handle(Tick(now)):
                if isinstance(action, Quarantine):
                    reason = action.reason
        if reason is None:
            return []
        # The agent is being replaced: every turn of this session ends cancelled, and what
        # was queued behind them too.
        actions: list[TurnsAction] = [QuarantineAgent(session_id, reason)]
        actions += [AnswerCancelled(p) for p, _m in session.in_flight.values()]
        actions += [AnswerCancelled(p) for p in self._drop_queue(session)]
        session.in_flight.clear()
        return actions

    def cut(self) -> list[QueuedPrompt]:
        """The agent process is gone: every prompt in flight, in every session, is over (the
        caller answers them). Queued prompts stay queued for :meth:`resume`."""
        cut: list[QueuedPrompt] = []
        for session in self._sessions.values():
            cut += [prompt for prompt, _machine in session.in_flight.values()]
            session.in_flight.clear()
        return cut

    def unsend(self, *prompts: QueuedPrompt) -> None:
        """``prompts`` were forwarded, in this order, but never reached the agent (their write
        was refused, or no agent was there): they leave the turns in flight and go back to the
        head of their sessions' queues, in the same order, for :meth:`resume` to forward after
        the restore. (They were admitted once, so a queue may go past ``max_queued``.)"""
        for prompt in reversed(prompts):
            session = self._sessions.setdefault(prompt.session_id, _Session())
            session.in_flight.pop(prompt.key, None)
            self._push(session, prompt, at_head=True)

    def resume(
        self, now: float, lost: Iterable[str] = ()
    ) -> tuple[list[TurnsAction], list[QueuedPrompt]]:
        """After a restore: forward the head of every queue with nothing in flight. Returns
        the actions and the queued prompts of ``lost`` sessions (which the caller refuses)."""
        refused: list[QueuedPrompt] = []
        for session_id in lost:
            session = self._sessions.pop(session_id, None)
            if session is not None:
                refused += self._drop_queue(session)
        actions: list[TurnsAction] = []
        for session_id, session in list(self._sessions.items()):
            if not session.in_flight:
                actions += self._next(session_id, session, now)
        return actions, refused

    def take_everything(self) -> list[QueuedPrompt]:
        """Every queued prompt (the agent is gone for good); in-flight ones are the caller's."""
        queued = [p for session in self._sessions.values() for p in session.queue]
        self._sessions.clear()
        self._queued_bytes = 0
        return queued

    def _forwarded(self, now: float) -> TurnMachine:
        """The machine of a prompt forwarded now (its write follows at once)."""
        machine = TurnMachine(self._timings)
        machine.handle(PromptSent(now))
        return machine

    def _next(self, session_id: str, session: _Session, now: float) -> list[TurnsAction]:
        if session.in_flight or not session.queue:
            if not session.in_flight and not session.queue:
                del self._sessions[session_id]
            return []
        prompt = self._pop(session)
        session.in_flight[prompt.key] = (prompt, self._forwarded(now))
        return [ForwardPrompt(prompt)]

    # -- the queues, and their bytes -------------------------------------------------------------

    def _push(self, session: _Session, prompt: QueuedPrompt, *, at_head: bool = False) -> None:
        if at_head:
            session.queue.appendleft(prompt)
        else:
            session.queue.append(prompt)
        self._queued_bytes += len(prompt.line)

    def _pop(self, session: _Session) -> QueuedPrompt:
        prompt = session.queue.popleft()
        self._queued_bytes -= len(prompt.line)
        return prompt

    def _drop_queue(self, session: _Session) -> list[QueuedPrompt]:
        dropped = list(session.queue)
        session.queue.clear()
        self._queued_bytes -= sum(len(prompt.line) for prompt in dropped)
        return dropped

    def _bytes_full(self) -> str:
        return (
            f"too many prompts queued: {self._queued_bytes} bytes of prompts wait behind "
            f"running turns (the bound is {self._max_queued_bytes}, proxy --max-buffer-bytes); "
            "send this again once a turn ends"
        )
