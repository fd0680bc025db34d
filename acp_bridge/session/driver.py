"""Runs turns of one session under the :class:`TurnMachine`: the cancel grace window lives here.

:meth:`TurnDriver.run` starts a turn on a client :class:`Session`, forwards its events, feeds
the machine (updates, the answer or failure, clock ticks, cancel requests) and performs what
the machine decides: send ``session/cancel`` (bounded: a pipe so full that even the cancel
cannot be written counts as no answer), arm the grace window, quarantine the agent. It returns
exactly one :class:`TurnOutcome` per turn.

Fencing the next turn from the last one's late updates (decided here, see edge-cases.md):

* an update whose ``messageId`` belongs to the previous turn never reaches the next one;
* after a turn that was cancelled or failed, the next prompt waits until the session has been
  quiet for ``settle_s`` (at most ``settle_max_s``), so a burst the agent keeps sending after
  its answer lands outside any turn. The quiet is counted from the turn's end: a next prompt
  that comes later than ``settle_s`` after it, with nothing received since, goes out at once.
  A turn that ended normally needs no wait: the protocol puts every update of a turn before
  its answer;
* a quarantined agent is replaced, and its session restored, before the next prompt.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import field

import anyio

from acp_bridge.client.events import TurnEvent
from acp_bridge.client.session import Content, Session
from acp_bridge.client.turn import Turn
from acp_bridge.core.turn_machine import (
    Tick,
    TurnCancelRequested,
    TurnOutcome,
    TurnTimings,
    UpdateArrived,
)
from acp_bridge.record import record
from acp_bridge.wire.acp import PromptResponse

__all__ = ["EventSink", "TurnDriver", "TurnPolicy"]

log = logging.getLogger(__name__)

EventSink = Callable[[TurnEvent], Awaitable[None]]


@record(slots=False)
class TurnPolicy:
    timings: TurnTimings = field(default_factory=TurnTimings)
    """The turn's windows; its ``cancel_grace_s`` is the one grace window of the turn."""
    settle_s: float = 0.05
    settle_max_s: float = 2.0


class TurnDriver:
    """Turns of one session, one at a time, each in the calling task: no helper tasks.

    The driver waits for the turn's next event under the machine's next deadline; a deadline
    becomes a :class:`Tick`, a :meth:`request_cancel` interrupts only that wait (never the
    delivery of an event), and the session performs what the machine decides.
    """

    def __init__(self, session: Session, policy: TurnPolicy | None = None) -> None:
        self.session = session
        self.policy = policy or TurnPolicy()
        self._turn: Turn | None = None
        self._pending_cancel: str | None = None
        self._waiting: anyio.CancelScope | None = None
        self._must_settle = False
        self._quiet_since = 0.0
        self._updates_at_end = 0

    @property
    def last_response(self) -> PromptResponse | None:
        """The prompt response of the last turn run, if the agent answered it (a cancelled
        turn's answer included); None if it failed or none ran."""
        return self._turn.response if self._turn is not None else None

    @property
    def is_running(self) -> bool:
        return self._turn is not None and not self._turn.is_closed

    def prepare(self) -> None:
        """A turn is about to start for certain: forget a cancel left over from the last one.

        Call it synchronously where the start is decided, then :meth:`run` with
        ``prepared=True``: a cancel asked for in between (a stop while the turn's task was
        being scheduled) then applies to that turn instead of being forgotten by ``run``."""
        self._pending_cancel = None

    def request_cancel(self, reason: str) -> None:
        """Cancel the running turn (or the one about to start). Idempotent; never blocks."""
        if self._pending_cancel is None:
            self._pending_cancel = reason
        if self._waiting is not None:
            self._waiting.cancel()

    async def cancel(self, reason: str) -> None:
        """Cancel the running turn now: ``session/cancel`` is written (bounded) in the calling
        task before this returns, sparing a wake-up of the driver. The turn still ends through
        :meth:`run`, within the grace window. A no-op when no turn runs."""
        turn = self._turn
        if turn is None or turn.is_closed:
            self.request_cancel(reason)  # the turn about to start
            return
        if self._pending_cancel is None:
            self._pending_cancel = reason
        cancel = TurnCancelRequested(reason, turn.clock())
        await self.session.perform(turn, turn.machine.handle(cancel))
        # The driver's wait needs the grace deadline, not a wake-up: move its deadline.
        deadline = turn.machine.next_deadline()
        waiting = self._waiting
        if waiting is not None and deadline is not None:
            waiting.deadline = min(waiting.deadline, deadline)

    async def run(
        self, content: Content, on_event: EventSink | None = None, *, prepared: bool = False
    ) -> TurnOutcome:
        """Run one turn to its outcome. A cancel asked for before the call is forgotten (it
        was for an earlier turn) unless :meth:`prepare` was called for this one.

        Raises:
            RestartLimitError: the agent is gone for good (no turn was started).
            ResourceClosedError: the session or agent was closed.
        """
        if not prepared:
            self._pending_cancel = None
        if self._must_settle:
            await self._settle()
        turn = await self.session.begin(content, self.policy.timings)
        self._turn = turn
        try:
            await self._drive(turn, on_event)
            if on_event is not None:
                await self._flush(turn, on_event)
        finally:
            self._waiting = None
            await self.session.end(turn)
        outcome = turn.machine.outcome
        assert outcome is not None
        self._must_settle = outcome.status != "done"
        if self._must_settle:
            # The quiet counts from the agent's answer or failure (a turn closed by its grace
            # window may have none yet: then from now).
            ended_at = turn.ended_at
            self._quiet_since = anyio.current_time() if ended_at is None else ended_at
            self._updates_at_end = self.session.updates_seen
        return outcome

    async def _drive(self, turn: Turn, on_event: EventSink | None) -> None:
        machine = turn.machine
        session = self.session
        watch_idle = machine.timings.idle_timeout_s is not None
        cancel_fed = False
        while not turn.is_closed:
            if self._pending_cancel is not None and not cancel_fed:
                cancel_fed = True
                now = turn.clock()
                await session.perform(
                    turn, machine.handle(TurnCancelRequested(self._pending_cancel, now))
                )
                continue
            deadline = machine.next_deadline()
            with anyio.CancelScope(deadline=math.inf if deadline is None else deadline) as scope:
                self._waiting = scope
                if self._pending_cancel is not None and not cancel_fed:
                    scope.cancel()  # asked while we performed the last action
                try:
                    event = await turn.__anext__()
                except StopAsyncIteration:
                    event = None
            self._waiting = None
            if scope.cancelled_caught:
                if self._pending_cancel is None or cancel_fed:
                    await session.perform(turn, machine.handle(Tick(turn.clock())))
                continue
            if event is None:
                # The agent's side ended; its answer or failure closed the machine.
                await turn.wait_quietly()
                if not turn.is_closed:
                    raise AssertionError(f"{turn!r} ended without closing its machine")
                return
            if deadline is not None or watch_idle:
                # An agent flooding updates never lets the wait block: read the clock per event
                # while a deadline runs (only then), so a grace window still expires.
                now = turn.clock()
                if watch_idle:
                    machine.handle(UpdateArrived(now))
                if deadline is not None and now >= deadline:
                    await session.perform(turn, machine.handle(Tick(now)))
            if on_event is not None:
                await on_event(event)

    async def _flush(self, turn: Turn, on_event: EventSink) -> None:
        """Events the turn buffered after the machine closed it, then (when a quarantine closed
        it before the agent answered) the closing of its still-open tool calls, once."""
        if not turn.has_leftovers:
            return
        for event in turn.take_buffered():
            await on_event(event)
        for closed in turn.close_tool_calls("the turn was cancelled"):
            await on_event(closed)

    async def _settle(self) -> None:
        """Wait until the session has been quiet for ``settle_s`` (see the module docstring),
        counting from the last turn's end; bounded by ``settle_max_s`` from now.

        The session counts updates instead of stamping them (a clock read per update costs
        the hot path), so quiet means: the count did not move across a whole window. An
        update seen after the turn's end starts a new window from now."""
        session = self.session
        settle_s = self.policy.settle_s
        since, seen = self._quiet_since, self._updates_at_end
        with anyio.move_on_after(self.policy.settle_max_s) as scope:
            while True:
                remaining = since + settle_s - anyio.current_time()
                if remaining > 0:
                    await anyio.sleep(remaining)
                if session.updates_seen == seen:
                    return
                since, seen = anyio.current_time(), session.updates_seen
        if scope.cancelled_caught:
            log.info("%s: still receiving late updates; starting the next turn", session.id)
