"""The host as an ACP agent to one connection, on rpc/'s :class:`JsonRpcPeer`.

Methods (docs/host.md has the wire): ``initialize``, ``session/new``, ``session/list``,
``session/load`` (attach: the stored history replayed, then live), ``session/resume`` (attach
at the head), ``session/prompt`` (into the conversation's durable queue; answered when that
message's own turn ends), ``session/cancel``, ``session/close``, ``session/set_mode``,
``session/set_config_option``; the unstable aliases ``session/attach`` and
``session/detach``; the host's own ``_acp_bridge/hello|status|send|cancel|stop|watch|unwatch``.
Other ``session/*`` and ``_*`` requests go to the conversation's agent, with its session id.

:func:`cancel_answer` and :func:`stop_answer` are what an owner does and answers for a cancel
or a stop, whether asked here or through a shared store (issue 23).

The sessionId a client sees IS the conversation id. Disconnecting detaches; it never stops a
conversation or its turn.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, Protocol

from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.store_api import Store
from acp_bridge.errors import BridgeError, RpcError
from acp_bridge.host.clients import Client
from acp_bridge.host.conversations import ConversationHub
from acp_bridge.host.steering import steering_requests
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.version import __version__

__all__ = [
    "PROTOCOL_VERSION",
    "ConversationEntry",
    "Conversations",
    "cancel_answer",
    "pause_in_store",
    "serve_methods",
    "stop_answer",
]

log = logging.getLogger(__name__)

PROTOCOL_VERSION: Final = 1
_INVALID_PARAMS: Final = -32602
_NOTIFY_WAIT_S: Final = 1.0
"""How long a relayed notification may wait to be written to the agent."""
_NOT_FOUND: Final = -32002  # ACP's "resource not found"


class ConversationEntry(Protocol):
    """One conversation a connection can reach."""

    @property
    def hub(self) -> ConversationHub: ...

    async def open(self) -> Conversation:
        """The open conversation (its agent started and its session restored if needed)."""
        ...

    def status(self) -> dict[str, Any]: ...

    async def close(self) -> None:
        """``session/close``: end the conversation on purpose."""
        ...

    async def stop(self) -> dict[str, Any]:
        """``_acp_bridge/stop``: :func:`stop_answer` of the conversation (or, when it is not
        open, the queue paused in the store)."""
        ...


async def cancel_answer(conversation: Conversation, seq: int | None = None) -> dict[str, Any]:
    """Cancel the running turn (only if it is message ``seq``, when given: a request acted on
    late never cancels a later turn); the queue goes on. ``{"cancelled", "seq"?}``."""
    running = conversation.queue.running
    if running is None or (seq is not None and running != seq):
        return {"cancelled": False}
    await conversation.stop()
    await conversation.resume()
    return {"cancelled": True, "seq": running}


async def stop_answer(conversation: Conversation) -> dict[str, Any]:
    """``Conversation.stop()``: the running turn cancelled (the grace window applies) and the
    queue paused, its messages kept queued until a send or a resume.
    ``{"cancelled", "seq"?, "queued"}``."""
    running = conversation.queue.running
    await conversation.stop()
    queued = sum(
        1
        for message in conversation.messages()
        if message.state is MessageState.QUEUED and message.seq != running
    )
    answer: dict[str, Any] = {"cancelled": running is not None, "queued": queued}
    if running is not None:
        answer["seq"] = running
    return answer


def pause_in_store(store: Store, conversation_id: str, now: float) -> dict[str, Any]:
    """A stop of a conversation nobody runs: its queue paused in the store (the next owner
    starts nothing until a send or a resume). The caller owns the conversation (its lock or
    lease). Blocking: run it in a worker thread from async code."""
    store.update_conversation(conversation_id, paused=True, now=now)
    return {"cancelled": False, "queued": len(store.queued(conversation_id))}


class Conversations(Protocol):
    """What the connections of one endpoint share: the host, or a run/chat owner."""

    store_path: Path
    socket_path: Path | None

    def find(self, conversation_id: str) -> ConversationEntry:
        """Raises RpcError when there is no such conversation (or it is not served here)."""
        ...

    async def create(self, params: dict[str, Any]) -> ConversationEntry:
        """``session/new``; raises RpcError where new conversations are not served."""
        ...

    def listing(self) -> list[dict[str, Any]]:
        """``session/list``'s sessions."""
        ...

    def entries(self) -> list[ConversationEntry]:
        """The conversations open now (``_acp_bridge/status``)."""
        ...


Handler = Callable[[Any], Awaitable[Any]]


def serve_methods(peer: JsonRpcPeer, client: Client, conversations: Conversations) -> None:
    """Register every method of the host's endpoint on ``peer`` for ``client``."""
    methods = _Methods(client, conversations)
    requests = methods.requests()
    # Steering (issue 24): steers become the conversation's durable steers (host/steering.py).
    requests.update(steering_requests(client, methods.find, requests))
    for name, handler in requests.items():
        peer.on_request(name, _unless_cut(client, handler))
    relay = methods.relay

    async def relay_unless_cut(method: str, params: Any) -> Any:
        _refuse_if_cut(client)
        return await relay(method, params)

    peer.on_other_requests(relay_unless_cut)
    peer.on_notification("session/cancel", methods.cancel_notification)
    peer.on_other_notifications(methods.relay_notification)


def _unless_cut(client: Client, handler: Handler) -> Handler:
    """``handler``, refusing once ``client`` was cut off (it stays connected only until it was
    told why: see :mod:`.clients`)."""

    async def guarded(params: Any) -> Any:
        _refuse_if_cut(client)
        return await handler(params)

    return guarded


def _refuse_if_cut(client: Client) -> None:
    if client.cut_reason is not None:
        raise RpcError(
            -32603,
            f"this connection was cut off: {client.cut_reason}. Connect again and reattach "
            "from your cursor",
        )


class _Methods:
    def __init__(self, client: Client, conversations: Conversations) -> None:
        self.client = client
        self.conversations = conversations

    def requests(self) -> dict[str, Handler]:
        return {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new,
            "session/list": self.list,
            "session/load": self.load,
            "session/resume": self.resume,
            "session/attach": self.resume,  # unstable: the ACP Remote draft's name
            "session/detach": self.detach,  # unstable
            "session/prompt": self.prompt,
            "session/cancel": self.cancel_request,
            "session/close": self.close,
            "session/set_mode": self.set_mode,
            "session/set_config_option": self.set_config_option,
            "_acp_bridge/hello": self.hello,
            "_acp_bridge/status": self.status,
            "_acp_bridge/send": self.send,
            "_acp_bridge/cancel": self.cancel,
            "_acp_bridge/stop": self.stop,
            "_acp_bridge/watch": self.watch,
            "_acp_bridge/unwatch": self.unwatch,
        }

    # -- ACP -----------------------------------------------------------------------------

    async def initialize(self, params: Any) -> dict[str, Any]:
        params = _dict(params)
        info = params.get("clientInfo")
        if isinstance(info, dict) and isinstance(info.get("name"), str) and info["name"]:
            self.client.label = f"{info['name'][:64]} ({self.client.number})"
        self.client.answers_permissions = True
        capabilities = _dict(params.get("clientCapabilities"))
        self.client.elicitation_modes = _elicitation_modes(capabilities.get("elicitation"))
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": True, "audio": True, "embeddedContext": True},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            },
            "agentInfo": {
                "name": "acp-bridge-host",
                "title": "acp-bridge host",
                "version": __version__,
            },
            "authMethods": [],
        }

    async def authenticate(self, params: Any) -> dict[str, Any]:
        return {}

    async def new(self, params: Any) -> dict[str, Any]:
        self._room_for_a_session()
        entry = await self.conversations.create(_dict(params))
        conversation = await entry.open()
        await entry.hub.attach(self.client, None, watch=False)
        return {"sessionId": entry.hub.id, **_session_state(conversation)}

    async def list(self, params: Any) -> dict[str, Any]:
        return {"sessions": self.conversations.listing()}

    async def load(self, params: Any) -> dict[str, Any]:
        entry = self._entry(params)
        self._room_for_a_session()
        conversation = await entry.open()
        await entry.hub.attach(self.client, 0, watch=False)
        await self.client.outbox.wait_handed(self.client.outbox.put_count)
        return _session_state(conversation)

    async def resume(self, params: Any) -> dict[str, Any]:
        entry = self._entry(params)
        self._room_for_a_session()
        conversation = await entry.open()
        await entry.hub.attach(self.client, None, watch=False)
        return _session_state(conversation)

    async def detach(self, params: Any) -> dict[str, Any]:
        self._entry(params).hub.detach(self.client)
        return {}

    async def prompt(self, params: Any) -> dict[str, Any]:
        params = _dict(params)
        entry = self._entry(params)
        content = params.get("prompt")
        if not isinstance(content, list) or not content:
            raise RpcError(_INVALID_PARAMS, "session/prompt needs a non-empty prompt")
        await entry.open()
        hub = entry.hub
        if self.client.number not in hub.attached:
            await hub.attach(self.client, None, watch=False)
        seq = await hub.send(content, client=self.client, label=None, wait=True)
        result = await hub.wait_turn(seq, self.client)
        return result.answer()

    async def cancel_notification(self, params: Any) -> None:
        try:
            await self._entry(params).hub.cancel()
        except (RpcError, BridgeError) as exc:
            log.info("%s: session/cancel: %s", self.client.label, exc)

    async def cancel_request(self, params: Any) -> None:
        await self.cancel_notification(params)

    async def close(self, params: Any) -> dict[str, Any]:
        entry = self._entry(params)
        await entry.close()
        return {}

    async def set_mode(self, params: Any) -> dict[str, Any]:
        params = _dict(params)
        conversation = await self._entry(params).open()
        mode = params.get("modeId")
        if not isinstance(mode, str):
            raise RpcError(_INVALID_PARAMS, "session/set_mode needs a modeId")
        await conversation.set_mode(mode)
        return {}

    async def set_config_option(self, params: Any) -> dict[str, Any]:
        params = _dict(params)
        conversation = await self._entry(params).open()
        config_id, value = params.get("configId"), params.get("value")
        if not isinstance(config_id, str) or not isinstance(value, str | bool):
            raise RpcError(_INVALID_PARAMS, "session/set_config_option needs configId and value")
        await conversation.set_config_option(config_id, value)
        return {"configOptions": [_dump(o) for o in conversation.session.config_options]}

    async def relay(self, method: str, params: Any) -> Any:
        """Another ``session/*`` or ``_*`` request: to the conversation's agent, with the
        agent's session id for the conversation's (the answer comes back unchanged)."""
        if not (method.startswith("session/") or method.startswith("_")):
            raise LookupError(method)
        if method.startswith("_acp_bridge/"):
            raise LookupError(method)  # ours: not a method we serve
        if method.startswith("_") and "sessionId" not in _dict(params):
            return await self._relay_unnamed(method, params)
        params = dict(_dict(params))
        conversation = await self._entry(params).open()
        params["sessionId"] = conversation.session.id
        agent = conversation.agent
        return await agent.call(lambda connection: connection.peer.request(method, params))

    async def relay_notification(self, method: str, params: Any) -> None:
        """Another ``session/*`` or ``_*`` notification: to the conversation's running agent
        (named by ``sessionId``, replaced by the agent's; a ``_*`` one naming none goes to the
        connection's one attached conversation, unchanged). A notification starts no agent:
        one whose agent is not ready is dropped (logged), and its write waits at most
        :data:`_NOTIFY_WAIT_S`, since notifications are handled in arrival order."""
        if method.startswith("_acp_bridge/") or not (
            method.startswith("session/") or method.startswith("_")
        ):
            log.debug("%s: ignored notification %s", self.client.label, method)
            return
        named = "sessionId" in _dict(params)
        sessions = sorted(self.client.sessions)
        try:
            if named:
                entry = self._entry(params)
            elif method.startswith("_") and len(sessions) == 1:
                entry = self.conversations.find(sessions[0])
            else:
                log.info("%s: notification %s names no session: dropped", self.client.label, method)
                return
        except RpcError as exc:
            log.info("%s: notification %s dropped: %s", self.client.label, method, exc.message)
            return
        conversation = entry.hub.conversation
        agent = None if conversation is None else conversation.agent
        if conversation is None or agent is None or not agent.is_ready:
            log.info("%s: notification %s dropped: no agent runs", self.client.label, method)
            return
        if named:
            params = {**_dict(params), "sessionId": conversation.session.id}
        try:
            written = await agent.connection.peer.notify_within(method, params, _NOTIFY_WAIT_S)
        except BridgeError as exc:  # the agent went away meanwhile
            log.info("%s: notification %s dropped: %s", self.client.label, method, exc)
            return
        if not written:
            log.info(
                "%s: notification %s dropped: the agent is not reading", self.client.label, method
            )

    async def _relay_unnamed(self, method: str, params: Any) -> Any:
        """An extension request that names no session (the SDKs' ``extMethod``): on a
        connection attached to one conversation, to that conversation's agent with its params
        unchanged, as the proxy relays it; otherwise the host cannot tell which agent."""
        sessions = sorted(self.client.sessions)
        if len(sessions) != 1:
            raise RpcError(
                _INVALID_PARAMS,
                f"{method} names no sessionId and this connection has {len(sessions)} sessions"
                " attached: give sessionId, or call it on a connection with one session",
            )
        conversation = await self.conversations.find(sessions[0]).open()
        agent = conversation.agent
        return await agent.call(lambda connection: connection.peer.request(method, params))

    # -- the host's own methods ----------------------------------------------------------

    async def hello(self, params: Any) -> dict[str, Any]:
        socket = self.conversations.socket_path
        return {
            "host": {
                "pid": os.getpid(),
                "store": str(self.conversations.store_path),
                "version": __version__,
                "socket": None if socket is None else str(socket),
            }
        }

    async def status(self, params: Any) -> dict[str, Any]:
        wanted = _dict(params).get("conversationId")
        if isinstance(wanted, str):
            return {"conversations": [self.conversations.find(wanted).status()]}
        return {"conversations": [entry.status() for entry in self.conversations.entries()]}

    async def send(self, params: Any) -> dict[str, Any]:
        params = _dict(params)
        entry = self._entry(params, key="conversationId")
        content = params.get("content")
        if not isinstance(content, list) or not content:
            raise RpcError(_INVALID_PARAMS, "_acp_bridge/send needs a non-empty content list")
        label = params.get("label")
        await entry.open()
        seq = await entry.hub.send(
            content,
            client=self.client,
            label=label if isinstance(label, str) and label else None,
            interrupt=bool(params.get("interrupt")),
        )
        return {"seq": seq}

    async def cancel(self, params: Any) -> dict[str, Any]:
        entry = self._entry(params, key="conversationId")
        cancelled, seq = await entry.hub.cancel()
        return {"cancelled": cancelled, **({"seq": seq} if seq is not None else {})}

    async def stop(self, params: Any) -> dict[str, Any]:
        return await self._entry(params, key="conversationId").stop()

    async def watch(self, params: Any) -> dict[str, Any]:
        params = _dict(params)
        entry = self._entry(params, key="conversationId")
        start = params.get("from")
        if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
            raise RpcError(_INVALID_PARAMS, "_acp_bridge/watch: from must be an integer cursor")
        self._room_for_a_session()
        cursor = await entry.hub.attach(self.client, 0 if start is None else start, watch=True)
        await self.client.outbox.wait_handed(self.client.outbox.put_count)  # the replay first
        return {"cursor": cursor}

    async def unwatch(self, params: Any) -> dict[str, Any]:
        self._entry(params, key="conversationId").hub.unwatch(self.client)
        return {}

    # -- helpers -------------------------------------------------------------------------

    def find(self, params: Any, key: str) -> ConversationEntry:
        return self._entry(params, key=key)

    def _entry(self, params: Any, *, key: str = "sessionId") -> ConversationEntry:
        value = _dict(params).get(key)
        if not isinstance(value, str) or not value:
            raise RpcError(_INVALID_PARAMS, f"{key} is required")
        most = self.client.limits.max_id_chars
        if len(value) > most:
            raise RpcError(_INVALID_PARAMS, f"{key} is longer than {most} characters")
        return self.conversations.find(value)

    def _room_for_a_session(self) -> None:
        count = len(self.client.sessions | self.client.watching)
        if count >= self.client.limits.max_sessions:
            raise RpcError(-32603, f"this connection has {count} sessions open, the most allowed")


def _elicitation_modes(advertised: Any) -> frozenset[str]:
    """The modes of ``clientCapabilities.elicitation``: a mode counts only when present and not
    null (``{}`` advertises nothing)."""
    modes = _dict(advertised)
    return frozenset(m for m in ("form", "url") if isinstance(modes.get(m), dict))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dump(value: Any) -> Any:
    dump = getattr(value, "dump", None)
    return dump() if callable(dump) else value


def _session_state(conversation: Conversation) -> dict[str, Any]:
    session = conversation.session
    state: dict[str, Any] = {}
    if session.config_options:
        state["configOptions"] = [_dump(o) for o in session.config_options]
    return state
