"""One prompt turn: its events as an async iterator with backpressure, its outcome, and the one
performer of its :class:`~acp_bridge.core.turn_machine.TurnMachine`.

Events. The connection's reader delivers each ``session/update`` of the turn into a bounded
buffer, so a consumer that reads slowly slows the reader instead of growing memory: at the
bound the event is still taken, and its deliverer waits until the consumer has taken one (or
left the turn, or the turn closed), so the buffer holds at most its bound plus one event per
waiting deliverer, and a deliverer cancelled while it waits loses nothing. The consumer
iterates the turn for events; iteration ends when the turn has closed, after every event of
the turn and the closing of the tool calls it left open. :meth:`Turn.wait` then gives the
outcome (or raises the failure), and also drains events nobody read, so a caller that only
wants the result cannot deadlock the reader.

The machine. The turn exists before its prompt is written (a cancel then is the machine's
early cancel), and the machine decides everything after: the deadlines, the cancel, the grace
window, the quarantine, the outcome (:attr:`Turn.outcome`). The turn performs what it decides,
whichever public call started the turn, in the task that waits on the turn: iterating it,
:meth:`Turn.wait`, or the session's ``end``. A waiter sleeps until the next event *or* the
machine's next deadline, so a deadline fires even when the agent sends nothing; and while a
deadline runs, taking a buffered event reads the clock, so an agent flooding updates cannot
hold a deadline off. With no deadline running (the common case) taking an event costs one
attribute check more than a bare deque. No helper task: a turn nobody waits on performs
nothing until someone does (the session's ``end`` always does).

The agent's side of the turn ends exactly once, synchronously (:meth:`finish_now` or
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
from dataclasses import field
from typing import Any, Protocol

import anyio

from acp_bridge.client.events import PermissionDecided, ToolCallClosed, TurnEvent, UpdateReceived
from acp_bridge.client.toolcalls import ToolCallTracker
from acp_bridge.clock import loop_clock
from acp_bridge.core.condition import Condition
from acp_bridge.core.turn_machine import (
    CancelUnwritable,
    Close,
    EndedBy,
    MachineEvent,
    PromptAnswered,
    PromptFailed,
    PromptSent,
    Quarantine,
    SendCancel,
    Tick,
    TurnAction,
    TurnCancelRequested,
    TurnMachine,
    TurnOutcome,
    TurnState,
    TurnStatus,
    TurnTimings,
    UpdateArrived,
)
from acp_bridge.errors import AgentExitedError, AuthRequiredError
from acp_bridge.record import record
from acp_bridge.wire.acp import PromptAnswer, PromptResponse

__all__ = ["Turn", "TurnHost", "TurnPolicy"]

log = logging.getLogger(__name__)


@record(slots=False)
class TurnPolicy:
    """A turn's windows, and the settle window after it."""

    timings: TurnTimings = field(default_factory=TurnTimings)
    """The turn's windows; its ``cancel_grace_s`` is the one grace window of the turn."""
    settle_s: float = 0.05
    """After the turn ended cancelled or failed, the next prompt of its session waits until
    the session has been quiet this long (counted from the turn's end)..."""
    settle_max_s: float = 2.0
    """... but no longer than this."""


class TurnHost(Protocol):
    """What a turn's performer needs from its session."""

    @property
    def quarantine_wait_s(self) -> float: ...

    async def write_cancel(self) -> bool:
        """``session/cancel`` and our pending permission requests answered ``cancelled``;
        False when the cancel could not be written within its bound."""
        ...

    async def quarantine(self, reason: str) -> None: ...


class Turn:
    """A prompt turn in progress. Iterate it for :data:`TurnEvent` s; :meth:`wait` for the end.

    ``host`` performs the machine's cancel and quarantine (the session); without one (a turn
    in a test) they do nothing.
    """

    def __init__(
        self,
        session_id: str,
        *,
        policy: TurnPolicy | None = None,
        buffer: int = 256,
        host: TurnHost | None = None,
    ) -> None:
        self.session_id = session_id
        self.policy = policy or TurnPolicy()
        self._host = host
        self._buffer: deque[TurnEvent] = deque()
        self._bound = buffer if buffer > 0 else math.inf
        self._reading = True
        """False once the consumer left (:meth:`close`, :meth:`wait_quietly`): events are
        dropped from then on."""
        self._delivering = True
        """False once the machine closed the turn or the consumer closed it: nothing more is
        buffered."""
        self._tail: list[TurnEvent] = []
        self._wakeup = Condition()
        """Notified for the consumer's side: an event buffered, the turn closed, the agent's
        side ended, an earlier deadline, an action owed."""
        self._room = Condition()
        """Notified when the consumer takes an event or leaves, or the turn closes, for the
        deliverers held back at the bound."""
        self._tool_calls = ToolCallTracker()
        self._answer: PromptAnswer | None = None
        self._failure: BaseException | None = None
        self.clock = loop_clock()
        """``anyio.current_time`` for the loop the turn runs in, without the backend lookup."""
        self.machine = TurnMachine(self.policy.timings)
        """The turn's one owner: deadlines, cancel, grace window, quarantine and the outcome."""
        self._owed: list[TurnAction] = []
        """Actions decided in a synchronous call (:meth:`request_cancel`, :meth:`prompt_sent`),
        performed by the next waiter."""
        self._deadline = math.inf
        """The machine's next deadline (cached: read on the hot path)."""
        self._watched = False
        """A deadline runs or an action is owed: the waiters and the consumer must look."""
        self._watch_idle = self.policy.timings.idle_timeout_s is not None
        self._last_update_at = 0.0
        """When the last update arrived (kept only while an idle deadline runs); given to the
        machine when its deadline comes, not per update."""
        self.ended_at: float | None = None
        """The loop's clock when the agent's side of the turn ended (answered, failed, or the
        agent gone)."""
        self.update_count = 0
        self._message_ids: set[str] = set()

    def __repr__(self) -> str:
        state = (
            "running"
            if not self.is_done
            else (f"failed: {self._failure}" if self._failure else f"ended: {self.stop_reason}")
        )
        return (
            f"<Turn session={self.session_id!r} [{state}, {self.machine.state.name}, "
            f"{self.update_count} updates]>"
        )

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
                self._room.notify_all()
                if self._watched:  # a deadline runs (one clock read per event) or a cancel is owed
                    await self._attend(self.clock())
                return event
            if not self._delivering:
                return self._next_from_tail()
            await self._wait()

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
    def outcome(self) -> TurnOutcome | None:
        """How the turn ended, and who ended it (None while it runs)."""
        return self.machine.outcome

    @property
    def stop_reason(self) -> str | None:
        return self._answer.stop_reason if self._answer is not None else None

    @property
    def response(self) -> PromptResponse | None:
        """The agent's answer once the turn ended with one (None while running, or failed);
        validated on first use (see :class:`~acp_bridge.wire.acp.PromptAnswer`)."""
        return self._answer.response if self._answer is not None else None

    async def wait(self) -> PromptResponse:
        """The prompt response, once the turn ended; unread events are discarded. The turn's
        deadlines and grace window are kept meanwhile: a turn cancelled by one returns the
        agent's answer to the cancel (see :attr:`outcome` for who ended it).

        Raises:
            AgentExitedError: the agent died during the turn, or was quarantined because it
                did not answer a cancel.
            RpcError: the agent answered the prompt with an error.
        """
        await self.wait_quietly()
        if self._failure is not None:
            raise self._failure
        assert self._answer is not None
        return self._answer.response

    async def wait_quietly(self) -> None:
        """Wait for the end, discarding unread events (the deadlines are kept); the outcome
        stays for :meth:`wait`.

        Nobody reads this turn's events from here on, so the buffer is released: the reader
        drops the rest instead of buffering them (no backpressure on a reader that nobody
        drains), and the wait is one wake-up at the end, not one per event."""
        if self._reading:
            self._stop_reading()
        while not self.is_done:
            await self._wait()

    async def cancel(self, by: EndedBy) -> None:
        """Cancel the turn now: ``session/cancel`` is written (bounded) in the calling task
        before this returns (once the prompt is out; before that the machine sends it right
        after the prompt). Whoever waits on the turn then keeps its grace window. Harmless on
        a turn already cancelled or closed."""
        if self._owed:
            await self._perform_owed()
        await self._perform(self._feed(TurnCancelRequested(by, self.clock())))

    def request_cancel(self, by: EndedBy) -> None:
        """Cancel the turn without blocking: the task waiting on the turn writes
        ``session/cancel`` (it is woken for it). Harmless on a turn already cancelled or
        closed."""
        self._owe(self._feed(TurnCancelRequested(by, self.clock())))

    # -- the bridge's side ------------------------------------------------------------------

    def prompt_sent(self) -> None:
        """The prompt is written: the deadlines start (and an early cancel goes out)."""
        now = self.clock()
        self._last_update_at = now
        self._owe(self._feed(PromptSent(now)))

    async def deliver_update(self, raw_update: dict[str, Any]) -> None:
        """Hand one update of this turn to the caller (waits while the buffer is full)."""
        # The agent's side ended once an outcome is recorded (two attribute reads, not the
        # is_done property's call: this runs once per update).
        ended = self._answer is not None or self._failure is not None
        if ended or not self._tool_calls.observe(raw_update):
            log.debug("dropped an update after its turn or tool call closed")
            return
        self.update_count += 1
        if self._watch_idle:
            self._last_update_at = self.clock()
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
        """The agent answered the prompt. Ignored once the turn ended."""
        if self._answer is not None or self._failure is not None:
            return
        self._answer = answer
        self._end()
        self._feed(PromptAnswered(answer.stop_reason))

    def fail_now(self, failure: BaseException) -> None:
        """The turn ended without an answer. Ignored once the turn ended."""
        if self._answer is not None or self._failure is not None:
            return
        self._failure = failure
        self._end()
        exited = isinstance(failure, AgentExitedError)
        recoverable = failure.recoverable if isinstance(failure, AgentExitedError) else True
        if isinstance(failure, AuthRequiredError):
            recoverable = False  # the user must log in first; the queue pauses here
        self._feed(PromptFailed(str(failure), recoverable, crashed=exited))

    async def _emit(self, event: TurnEvent) -> None:
        # Nobody listening any more (the caller left the turn) is fine: the event is dropped.
        # A checkpoint per event would be pure overhead; the only wait is the backpressure.
        if not (self._delivering and self._reading):
            return
        buffer = self._buffer
        buffer.append(event)
        self._wakeup.notify_all()
        while len(buffer) > self._bound and self._reading and self._delivering:
            await self._room.wait()

    def _end(self) -> None:
        self.ended_at = self.clock()
        self._wake()

    def take_buffered(self) -> list[TurnEvent]:
        """The events buffered right now (and, once the turn closed, the closing tail),
        without waiting."""
        events: list[TurnEvent] = []
        if self._reading and self._buffer:
            events.extend(self._buffer)
            self._buffer.clear()
            self._wake_deliverers()
        if self._tail and self.is_closed:
            events.extend(self._tail)
            self._tail.clear()
        return events

    def close(self) -> None:
        """Release the event buffer: the caller reads no more events of this turn. A late
        update or answer still lands quietly (dropped; an answer still ends the turn)."""
        self._delivering = False
        if self._reading:
            self._stop_reading()
        self._wake()

    def discard(self) -> None:
        """Release everything of a turn that never started."""
        self.close()

    def _stop_reading(self) -> None:
        self._reading = False
        self._buffer.clear()
        self._wake_deliverers()

    # -- performing the machine ----------------------------------------------------------------

    def _feed(self, event: MachineEvent) -> list[TurnAction]:
        """One event into the machine; what it closes is closed here, synchronously, and the
        cached deadline follows the machine. Returns the actions still to perform."""
        machine = self.machine
        actions = machine.handle(event)
        for action in actions:
            if isinstance(action, Close):
                self._closed(action.outcome)
        deadline = machine.next_deadline()
        deadline = math.inf if deadline is None else deadline
        if deadline < self._deadline:
            self._wake()  # a waiter sleeps until the later one
        self._deadline = deadline
        self._watched = bool(self._owed) or deadline != math.inf
        return actions

    def _closed(self, outcome: TurnOutcome) -> None:
        """The machine closed the turn: nothing more is delivered, nothing owed is performed,
        and the open tool calls are closed once, after the buffered events."""
        self._owed.clear()
        self._delivering = False
        answer = self._answer
        if outcome.status is TurnStatus.FAILED:
            self._tail.extend(self._close_tool_calls(outcome.error or "the turn failed"))
        elif outcome.status is TurnStatus.CANCELLED or (answer and answer.is_cancelled()):
            self._tail.extend(self._close_tool_calls("the turn was cancelled"))
        self._wake_deliverers()
        self._wake()

    def _owe(self, actions: list[TurnAction]) -> None:
        owed = [a for a in actions if isinstance(a, SendCancel | Quarantine)]
        if owed:
            self._owed += owed
            self._watched = True
            self._wake()

    async def _perform_owed(self) -> None:
        actions, self._owed = self._owed, []
        self._watched = self._deadline != math.inf
        await self._perform(actions)

    async def _perform(self, actions: list[TurnAction]) -> None:
        """Carry out what the machine decided (ArmGrace and Close need nothing here: the
        deadline is read from the machine, the close was done when it was decided)."""
        for action in actions:
            if isinstance(action, SendCancel):
                # Bounded by the agent (cancel_write_timeout_s): a pipe so full that even the
                # cancel cannot be written counts as no answer.
                host = self._host
                if host is not None and not await host.write_cancel():
                    await self._perform(self._feed(CancelUnwritable()))
            elif isinstance(action, Quarantine):
                await self._quarantine(action.reason)

    async def _quarantine(self, reason: str) -> None:
        log.warning("%s: quarantining the agent: %s", self.session_id, reason)
        host = self._host
        try:
            if host is not None:
                await host.quarantine(reason)
                # The exit report fails the turn's agent side; wait for it, bounded, so the
                # next prompt goes to the restored session, not the dying process.
                with anyio.move_on_after(host.quarantine_wait_s):
                    while not self.is_done:
                        await self._wait()
        finally:
            if not self.is_done:  # no report in time: the turn's agent side ends here
                self.fail_now(AgentExitedError(f"quarantined: {reason}", recoverable=True))

    async def _wait(self) -> None:
        """Wait for the consumer's next wake-up, under the machine's next deadline; then
        perform what is owed or due."""
        if not self._watched:
            await self._wakeup.wait()
        elif self._owed:
            await self._perform_owed()
        else:
            with anyio.CancelScope(deadline=self._deadline):
                await self._wakeup.wait()
            await self._attend(self.clock())

    async def _attend(self, now: float) -> None:
        if self._owed:
            await self._perform_owed()
        if now >= self._deadline:
            if self._watch_idle:  # the last update's time, given now rather than per update
                self._feed(UpdateArrived(self._last_update_at))
            await self._perform(self._feed(Tick(now)))

    def _wake(self) -> None:
        self._wakeup.notify_all()

    def _wake_deliverers(self) -> None:
        self._room.notify_all()

    def _close_tool_calls(self, reason: str) -> list[ToolCallClosed]:
        """Close the open tool calls now (once: they are never closed or updated again)."""
        if not self._tool_calls.has_open:
            return []
        return [
            ToolCallClosed(self.session_id, tool_call_id, "failed", reason)
            for tool_call_id in self._tool_calls.close_all()
        ]
