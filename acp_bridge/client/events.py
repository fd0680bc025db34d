"""Events a supervised agent reports to its caller: frozen records, and the hub that fans
lifecycle events out to subscribers.

Two streams carry them:

* **lifecycle events** (:class:`AgentStarted`, :class:`AgentExited`, :class:`AgentRestarting`,
  :class:`SessionRestored`, :class:`SessionReplaced`, :class:`AgentGaveUp`) from
  ``SupervisedAgent.events()``: every exit, restart and give-up is visible;
* **turn events** (:class:`UpdateReceived`, :class:`PermissionDecided`,
  :class:`ToolCallClosed`) from iterating a ``Turn``.

``kind`` is the snake_case name the CLI uses for ``--json`` output.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acp_bridge.record import record

if TYPE_CHECKING:
    from acp_bridge.wire.updates import SessionUpdate

log = logging.getLogger(__name__)

__all__ = [
    "AgentExited",
    "AgentGaveUp",
    "AgentRestarting",
    "AgentStarted",
    "EventHub",
    "LifecycleEvent",
    "PermissionDecided",
    "SessionReplaced",
    "SessionRestored",
    "ToolCallClosed",
    "TurnEvent",
    "UpdateReceived",
]


@record
class AgentStarted:
    """A process was started and answered ``initialize``."""

    kind: ClassVar[str] = "agent_started"
    agent: str
    pid: int
    agent_info: dict[str, Any] | None
    protocol_version: int
    generation: int
    """1 for the first process, 2 after the first restart, and so on."""


@record
class AgentExited:
    """A process ended, or was ended by us (quarantine, watchdog, stdout closed)."""

    kind: ClassVar[str] = "agent_exited"
    agent: str
    pid: int
    returncode: int | None
    signal: int | None
    reason: str
    stderr_tail: str
    will_restart: bool


@record
class AgentRestarting:
    """The policy decided to restart; the new process starts after ``delay_s``."""

    kind: ClassVar[str] = "agent_restarted"
    agent: str
    attempt: int
    delay_s: float


@record
class SessionRestored:
    """A session lives on in the new process under the same id (``how``: load or resume)."""

    kind: ClassVar[str] = "session_restored"
    session_id: str
    how: str


@record
class SessionReplaced:
    """A session could not be restored; a new one, with a new id, stands in for it."""

    kind: ClassVar[str] = "session_replaced"
    old: str
    new: str
    reason: str


@record
class AgentGaveUp:
    """The restart policy gave up; the agent is failed until a new agent is opened."""

    kind: ClassVar[str] = "agent_gave_up"
    agent: str
    reason: str
    history: tuple[str, ...] = field(default_factory=tuple)


LifecycleEvent = (
    AgentStarted | AgentExited | AgentRestarting | SessionRestored | SessionReplaced | AgentGaveUp
)


@record(slots=False)
class UpdateReceived:
    """A ``session/update`` of this turn.

    ``raw`` is the update exactly as the agent sent it (nothing dropped). ``update`` is its typed
    form, built on first access (validating every update up front costs a third of streaming
    throughput, and many consumers only forward ``raw``), or None when a known kind was
    malformed (``raw`` still has it).
    """

    kind: ClassVar[str] = "update"
    session_id: str
    raw: dict[str, Any]

    @functools.cached_property
    def update(self) -> SessionUpdate | None:
        # Imported here: the session/update models are not needed until a consumer asks.
        from acp_bridge.wire.updates import SESSION_UPDATE_ADAPTER

        try:
            return SESSION_UPDATE_ADAPTER.validate_python(self.raw, by_alias=True, by_name=False)
        except pydantic.ValidationError as exc:
            log.warning("malformed %s update kept raw: %s", self.raw.get("sessionUpdate"), exc)
            return None


@record
class PermissionDecided:
    """The agent asked permission and the policy answered (``option_kind`` None = cancelled)."""

    kind: ClassVar[str] = "permission"
    session_id: str
    tool_call: dict[str, Any]
    option_id: str | None
    option_kind: str | None
    mode: str


@record
class ToolCallClosed:
    """A tool call the turn left open was closed by the bridge (the turn failed or was
    cancelled). Sent once per tool call; nothing the agent sends later overrides it."""

    kind: ClassVar[str] = "tool_call_closed"
    session_id: str
    tool_call_id: str
    status: str
    reason: str


TurnEvent = UpdateReceived | PermissionDecided | ToolCallClosed


class EventHub:
    """Fans lifecycle events out to subscribers and keeps the latest ones.

    An agent must never wait on a listener that stopped reading, so emitting never blocks.
    Each subscriber buffers up to ``subscriber_buffer`` events (lifecycle events are rare: a
    restart is a handful, and the restart policy caps restarts). A subscriber whose buffer is
    full has stopped reading: it is dropped, its stream ends, and a warning says so.
    """

    def __init__(self, *, agent_name: str, keep: int = 1000, subscriber_buffer: int = 1024) -> None:
        self._agent_name = agent_name
        self._subscriber_buffer = subscriber_buffer
        self._subscribers: list[MemoryObjectSendStream[LifecycleEvent]] = []
        self._listeners: list[Callable[[LifecycleEvent], None]] = []
        self.log: deque[LifecycleEvent] = deque(maxlen=keep)

    def subscribe(self) -> MemoryObjectReceiveStream[LifecycleEvent]:
        send, receive = anyio.create_memory_object_stream[LifecycleEvent](self._subscriber_buffer)
        self._subscribers.append(send)
        return receive

    def listen(self, listener: Callable[[LifecycleEvent], None]) -> Callable[[], None]:
        """Call ``listener(event)`` synchronously inside every :meth:`emit`, so the listener
        sees each event at the moment it happens, in causal order with the caller's own
        events. It must not block or raise. Returns the function that stops listening."""
        self._listeners.append(listener)

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop

    def emit(self, event: LifecycleEvent) -> None:
        self.log.append(event)
        # ``acp_event`` marks the record as the log twin of an event: a front-end that renders
        # the events itself (``run``, ``chat``) leaves such records out of its log.
        log.info("%s: %s", self._agent_name, event, extra={"acp_event": event.kind})
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("%s: a lifecycle listener failed", self._agent_name)
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                log.warning(
                    "%s: a lifecycle subscriber stopped reading (%d events unread); dropped",
                    self._agent_name,
                    self._subscriber_buffer,
                )
                self._subscribers.remove(send)
                send.close()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.remove(send)
                send.close()

    def close(self) -> None:
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()
