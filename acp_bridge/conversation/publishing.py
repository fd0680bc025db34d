"""A conversation's events, published in causal order with non-decreasing ``ts``.

Two sources feed subscribers: the conversation's own events (queued, turn_started, update,
turn_ended, ...), emitted by its tasks, and the agent's lifecycle events (agent_exited,
agent_restarted, session_restored, ...), which the supervisor emits synchronously, from
wherever it happens to be. :class:`EventPublisher` hears the latter as they happen
(``SupervisedAgent.listen``), stamps and queues them, and publishes every event under one lock,
lifecycle events first: so a lifecycle event is never shown after an event that happened later
(a subscriber task would show it only after events emitted while it waited to run).

One ordering is causal but not temporal: when the agent's exit cuts a running turn, the turn
failed at the exit, yet its ``turn_failed`` is recorded by the conversation a moment later.
After publishing that ``agent_exited``, the lifecycle events that follow wait for the turn's
final event (:meth:`EventPublisher.turn_final`), then go out; their ``ts`` is then the time
shown, so ``ts`` never goes backwards (the ``--json`` contract).

Bounds: pending lifecycle events are few (a restart is a handful) and kept in a bounded queue
(the oldest is dropped, with a warning, at :data:`LIFECYCLE_PENDING`); the subscribers'
bounds are :class:`~acp_bridge.conversation.fanout.EventFanout`'s.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio

from acp_bridge.client.events import AgentExited, LifecycleEvent, SessionReplaced
from acp_bridge.conversation.fanout import ConversationEvent, EventFanout, lifecycle_json

__all__ = ["LIFECYCLE_PENDING", "EventPublisher", "LogEvent", "SessionMoved"]

log = logging.getLogger(__name__)

LIFECYCLE_PENDING: Final = 1024
"""Lifecycle events waiting to be published (they go out at the next event, or at once)."""

LogEvent = Callable[[str, dict[str, Any], "int | None", float], Awaitable[None]]
"""``log_event(name, data, seq, now)``: commit an event to the conversation's event log."""
SessionMoved = Callable[[str, float], Awaitable[None]]
"""``session_moved(new_session_id, now)``: the agent replaced the session; store the new id."""


class EventPublisher:
    def __init__(
        self,
        fanout: EventFanout,
        *,
        clock: Callable[[], float],
        log_event: LogEvent,
        session_moved: SessionMoved,
        name: str,
    ) -> None:
        self._fanout = fanout
        self._clock = clock
        self._log_event = log_event
        self._session_moved = session_moved
        self._name = name
        self._pending: deque[tuple[LifecycleEvent, float]] = deque(maxlen=LIFECYCLE_PENDING)
        self._lock = anyio.Lock(fast_acquire=True)
        self._bell, self._rung = anyio.create_memory_object_stream[None](1)
        self._last_ts = 0.0
        self._running_seq: int | None = None
        self._held_for: int | None = None

    # -- the turn's side ---------------------------------------------------------------------

    def turn_started(self, seq: int) -> None:
        self._running_seq = seq

    def turn_final(self, seq: int) -> None:
        """``seq``'s final event was published: lifecycle events held behind it may go."""
        if seq == self._running_seq:
            self._running_seq = None
        if seq == self._held_for:
            self._held_for = None
            self._ring()

    # -- the agent's side --------------------------------------------------------------------

    def note_lifecycle(self, event: LifecycleEvent) -> None:
        """The agent's lifecycle listener: synchronous, called as the event happens."""
        if len(self._pending) == self._pending.maxlen:
            log.warning("%s: lifecycle events are not being published; dropping one", self._name)
        self._pending.append((event, round(self._clock(), 6)))
        self._ring()

    async def forward_lifecycle(self) -> None:
        """Publish lifecycle events that no other event carried out (run it as a task)."""
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
            async for _ in self._rung:
                await self.flush_lifecycle()

    async def flush_lifecycle(self, *, final: bool = False) -> None:
        """Publish the lifecycle events waiting (``final``: all of them, held or not)."""
        async with self._lock:
            if final:
                self._held_for = None
            await self._publish_lifecycle()

    # -- publishing ---------------------------------------------------------------------------

    async def emit(
        self, name: str, data: dict[str, Any], *, seq: int | None = None, keep: bool = False
    ) -> None:
        """Publish an event (``keep``: commit it to the event log first; for rare events only,
        each is one fsynced commit). Lifecycle events that happened before it go first."""
        if name == "update" and not (keep or self._pending or self._fanout.subscribed):
            return  # no one to show it to, and no replay keeps it (the host follows the log)
        async with self._lock:
            if self._pending:
                await self._publish_lifecycle()
            now = self._last_ts = max(round(self._clock(), 6), self._last_ts)
            if keep:
                await self._log_event(name, data, seq, now)
            event: ConversationEvent = {"event": name, "ts": now, **data}
            await self._fanout.publish(event)

    def close(self) -> None:
        self._bell.close()
        self._rung.close()
        self._fanout.close()

    async def _publish_lifecycle(self) -> None:
        while self._pending:
            event, occurred = self._pending[0]
            if self._held_for is not None and not isinstance(event, AgentExited):
                return  # until the turn cut by the exit has published its end
            self._pending.popleft()
            ts = self._last_ts = max(occurred, self._last_ts)  # held ones: the time shown
            if isinstance(event, AgentExited) and self._running_seq is not None:
                self._held_for = self._running_seq
            name, data = lifecycle_json(event)
            if isinstance(event, SessionReplaced):
                await self._session_moved(event.new, ts)
            await self._log_event(name, data, None, ts)
            await self._fanout.publish({"event": name, "ts": ts, **data})

    def _ring(self) -> None:
        with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError):
            self._bell.send_nowait(None)
