"""One prompt turn: its events as an async iterator with backpressure, and its outcome.

The connection's reader delivers each ``session/update`` of the turn into a bounded buffer, so a
consumer that reads slowly slows the reader instead of growing memory: at the bound the event is
still taken, and its deliverer waits until the consumer has taken one (or left the turn), so the
buffer holds at most its bound plus one event per waiting deliverer, and a deliverer cancelled
while it waits loses nothing. The consumer iterates the turn for events; iteration ends when
the turn has ended, after every event of the turn. :meth:`Turn.wait` then gives the outcome (or
raises the failure), and also drains events nobody read, so a caller that only wants the result
cannot deadlock the reader.

The turn's lifecycle belongs to its :class:`~acp_bridge.core.turn_machine.TurnMachine`
(``Turn.machine``): the prompt's answer and failure are fed to it here, a cancel, the grace
window and a quarantine by whoever runs the turn (``Session.end`` or the session layer's
driver). The *agent's* side of the turn ends exactly once, synchronously (:meth:`finish_now` or
:meth:`fail_now`; the second is ignored), so no answer can land between a check and a write.
The answer ends the turn in the connection's reader, before it reads the next line, so
whatever the agent sends after its answer is never part of the turn (the answered fence).
The closing of tool calls the turn left open goes to a small tail that the consumer reads after
the buffered events: ending a turn never waits for a slow consumer.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any

import anyio

from acp_bridge.client.events import PermissionDecided, ToolCallClosed, TurnEvent, UpdateReceived
from acp_bridge.client.toolcalls import ToolCallTracker
from acp_bridge.clock import loop_clock
from acp_bridge.core.turn_machine import (
    PromptAnswered,
    PromptFailed,
    TurnMachine,
    TurnState,
    TurnTimings,
)
from acp_bridge.errors import AgentExitedError, AuthRequiredError
from acp_bridge.wire.acp import PromptAnswer, PromptResponse

__all__ = ["Turn"]

log = logging.getLogger(__name__)


class Turn:
    """A prompt turn in progress. Iterate it for :data:`TurnEvent` s; :meth:`wait` for the end."""

    def __init__(
        self, session_id: str, *, buffer: int = 256, timings: TurnTimings | None = None
    ) -> None:
        self.session_id = session_id
        self._buffer: deque[TurnEvent] = deque()
        self._bound = buffer if buffer > 0 else math.inf
        self._reading = True
        """False once the consumer left (:meth:`close`, :meth:`wait_quietly`): events are
        dropped from then on."""
        self._delivering = True
        """False once the agent's side ended or the turn was closed: nothing more is buffered."""
        self._tail: list[TurnEvent] = []
        self._readable: anyio.Event | None = None
        """Set (and dropped) when an event is buffered or the delivering side ends, for the
        consumers waiting on an empty buffer."""
        self._room: anyio.Event | None = None
        """Set (and dropped) when the consumer takes an event or leaves, for the deliverers
        held back at the bound."""
        self._ended: anyio.Event | None = None
        """Made only when someone waits for the agent's side to end (:meth:`wait_quietly`)."""
        self._tool_calls = ToolCallTracker()
        self._answer: PromptAnswer | None = None
        self._failure: BaseException | None = None
        self.clock = loop_clock()
        """``anyio.current_time`` for the loop the turn runs in, without the backend lookup."""
        self.machine = TurnMachine(timings or TurnTimings(), now=self.clock())
        """The turn's one owner: cancel, grace window, quarantine and the outcome."""
        self.ended_at: float | None = None
        """``anyio.current_time()`` when the agent's side of the turn ended (answered,
        failed, or the agent gone)."""
        self.update_count = 0
        self._message_ids: set[str] = set()

    def __repr__(self) -> str:
        state = (
            "running"
            if not self.is_done
            else (f"failed: {self._failure}" if self._failure else f"ended: {self.stop_reason}")
        )
        return f"<Turn session={self.session_id!r} [{state}, {self.update_count} updates]>"

    # -- the caller's side ------------------------------------------------------------------

    def __aiter__(self) -> Turn:
        return self

    async def __anext__(self) -> TurnEvent:
        # What is buffered is taken without a scheduler pass, and an empty buffer is waited on
        # without one either (anyio's memory streams checkpoint before they even look: a whole
        # pass each time the consumer catches up with the reader, the larger half of streaming
        # cost, and a pass on the way to a cancelled turn's end). The wait is the cancel point.
        while True:
            if not self._reading:
                return self._next_from_tail()
            buffer = self._buffer
            if buffer:
                event = buffer.popleft()
                if self._room is not None:
                    self._wake_deliverers()
                return event
            if not self._delivering:
                return self._next_from_tail()
            readable = self._readable
            if readable is None:
                readable = self._readable = anyio.Event()
            await readable.wait()

    def _wake_readers(self) -> None:
        readable = self._readable
        if readable is not None:
            self._readable = None
            readable.set()

    def _wake_deliverers(self) -> None:
        room = self._room
        if room is not None:
            self._room = None
            room.set()

    def _next_from_tail(self) -> TurnEvent:
        if self._tail:
            return self._tail.pop(0)
        raise StopAsyncIteration

    @property
    def is_done(self) -> bool:
        """The agent's side of the turn ended (answered, failed, or the agent is gone)."""
        return self._answer is not None or self._failure is not None

    @property
    def is_closed(self) -> bool:
        """The turn's machine closed it (for the caller the turn is over, whatever the agent
        does next)."""
        return self.machine.state is TurnState.CLOSED

    @property
    def stop_reason(self) -> str | None:
        return self._answer.stop_reason if self._answer is not None else None

    @property
    def response(self) -> PromptResponse | None:
        """The agent's answer once the turn ended with one (None while running, or failed);
        validated on first use (see :class:`~acp_bridge.wire.acp.PromptAnswer`)."""
        return self._answer.response if self._answer is not None else None

    async def wait(self) -> PromptResponse:
        """The prompt response, once the turn ended; unread events are discarded.

        Raises:
            AgentExitedError: the agent died during the turn.
            RpcError: the agent answered the prompt with an error.
        """
        await self.wait_quietly()
        if self._failure is not None:
            raise self._failure
        assert self._answer is not None
        return self._answer.response

    async def wait_quietly(self) -> None:
        """Wait for the end, discarding unread events; the outcome stays for :meth:`wait`.

        Nobody reads this turn's events from here on, so the buffer is released: the reader
        drops the rest instead of buffering them (no backpressure on a reader that nobody
        drains), and the wait is one wake-up at the end, not one per event."""
        if self.is_done:
            return
        if self._reading:
            self._stop_reading()
        ended = self._ended
        if ended is None:
            ended = self._ended = anyio.Event()
        await ended.wait()

    # -- the bridge's side ------------------------------------------------------------------

    async def deliver_update(self, raw_update: dict[str, Any]) -> None:
        """Hand one update of this turn to the caller (waits while the buffer is full)."""
        # The agent's side ended once an outcome is recorded (two attribute reads, not the
        # is_done property's call: this runs once per update).
        ended = self._answer is not None or self._failure is not None
        if ended or not self._tool_calls.observe(raw_update):
            log.debug("dropped an update after its turn or tool call closed")
            return
        self.update_count += 1
        message_id = raw_update.get("messageId")
        if isinstance(message_id, str):
            self._message_ids.add(message_id)
        await self._emit(UpdateReceived(self.session_id, raw_update))

    @property
    def message_ids(self) -> frozenset[str]:
        """The messageIds the agent used in this turn."""
        return frozenset(self._message_ids)

    async def deliver_permission(self, decision: PermissionDecided) -> None:
        if self._answer is None and self._failure is None:
            await self._emit(decision)

    def finish_now(self, answer: PromptAnswer) -> None:
        """The agent answered the prompt. A ``cancelled`` answer, or any answer to a cancel,
        closes the open tool calls. Ignored once the turn ended."""
        if self._answer is not None or self._failure is not None:
            return
        self._answer = answer
        if self._tool_calls.has_open and (
            self.machine.cancel_reason is not None or answer.is_cancelled()
        ):
            self._tail.extend(self.close_tool_calls("the turn was cancelled"))
        self._end()
        self.machine.handle(PromptAnswered(answer.stop_reason))

    def fail_now(self, failure: BaseException) -> None:
        """The turn ended without an answer; open tool calls are closed as failed. Ignored
        once the turn ended."""
        if self._answer is not None or self._failure is not None:
            return
        self._failure = failure
        self._tail.extend(self.close_tool_calls(str(failure)))
        self._end()
        recoverable = failure.recoverable if isinstance(failure, AgentExitedError) else True
        if isinstance(failure, AuthRequiredError):
            recoverable = False  # the user must log in first; the queue pauses here
        self.machine.handle(PromptFailed(str(failure), recoverable))

    def close_tool_calls(self, reason: str) -> list[ToolCallClosed]:
        """Close the open tool calls now (once: they are never closed or updated again)."""
        if not self._tool_calls.has_open:
            return []
        return [
            ToolCallClosed(self.session_id, tool_call_id, "failed", reason)
            for tool_call_id in self._tool_calls.close_all()
        ]

    async def _emit(self, event: TurnEvent) -> None:
        # Nobody listening any more (the caller left the turn) is fine: the event is dropped.
        # A checkpoint per event would be pure overhead; the only wait is the backpressure.
        if not (self._delivering and self._reading):
            return
        buffer = self._buffer
        buffer.append(event)
        if self._readable is not None:
            self._wake_readers()
        while len(buffer) > self._bound and self._reading:
            room = self._room
            if room is None:
                room = self._room = anyio.Event()
            await room.wait()

    def _end(self) -> None:
        self.ended_at = self.clock()
        self._delivering = False
        self._wake_readers()
        ended = self._ended
        if ended is not None:
            ended.set()

    @property
    def has_leftovers(self) -> bool:
        """Events :meth:`take_buffered` would give, or tool calls still open."""
        return bool((self._reading and self._buffer) or self._tail) or self._tool_calls.has_open

    def take_buffered(self) -> list[TurnEvent]:
        """The events buffered right now (and, once the agent's side ended, the closing tail),
        without waiting."""
        events: list[TurnEvent] = []
        if self._reading and self._buffer:
            events.extend(self._buffer)
            self._buffer.clear()
            self._wake_deliverers()
        if self._tail and self.is_done:
            events.extend(self._tail)
            self._tail.clear()
        return events

    def close(self) -> None:
        """Release the event buffer: the caller reads no more events of this turn. A late
        update or answer still lands quietly (dropped; an answer still ends the turn)."""
        self._delivering = False
        if self._reading:
            self._stop_reading()
        if self._readable is not None:
            self._wake_readers()

    def discard(self) -> None:
        """Release everything of a turn that never started."""
        self.close()

    def _stop_reading(self) -> None:
        self._reading = False
        self._buffer.clear()
        self._wake_deliverers()
