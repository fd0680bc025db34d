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
  its answer lands outside any turn. A turn that ended normally needs no wait: the protocol
  puts every update of a turn before its answer;
* a quarantined agent is replaced, and its session restored, before the next prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from acp_bridge.client.events import TurnEvent
from acp_bridge.client.session import Content, Session
from acp_bridge.client.turn import Turn
from acp_bridge.errors import AgentExitedError, BridgeError
from acp_bridge.session.turn import (
    ArmGrace,
    CancelPermissions,
    CancelRequested,
    CancelUnwritable,
    Close,
    PromptAnswered,
    PromptFailed,
    Quarantine,
    SendCancel,
    Tick,
    TurnAction,
    TurnMachine,
    TurnOutcome,
    TurnTimings,
    UpdateArrived,
)
from acp_bridge.session.turn import TurnEvent as MachineEvent

__all__ = ["EventSink", "TurnDriver", "TurnPolicy"]

log = logging.getLogger(__name__)

EventSink = Callable[[TurnEvent], Awaitable[None]]


@dataclass(frozen=True)
class TurnPolicy:
    timings: TurnTimings = field(default_factory=TurnTimings)
    cancel_write_timeout_s: float = 1.0
    """Writing ``session/cancel`` may take this long; longer means the agent is stuck."""
    settle_s: float = 0.05
    settle_max_s: float = 2.0


class TurnDriver:
    """Turns of one session, one at a time."""

    def __init__(self, session: Session, policy: TurnPolicy | None = None) -> None:
        self.session = session
        self.policy = policy or TurnPolicy()
        self._machine: TurnMachine | None = None
        self._pending_cancel: str | None = None
        self._wake = anyio.Event()
        self._closed = anyio.Event()
        self._must_settle = False

    @property
    def is_running(self) -> bool:
        return self._machine is not None and self._machine.outcome is None

    def request_cancel(self, reason: str) -> None:
        """Cancel the running turn (or the one about to start). Idempotent; never blocks."""
        if self._pending_cancel is None:
            self._pending_cancel = reason
        self._wake.set()

    async def run(self, content: Content, on_event: EventSink | None = None) -> TurnOutcome:
        """Run one turn to its outcome.

        Raises:
            RestartLimitError: the agent is gone for good (no turn was started).
            ResourceClosedError: the session or agent was closed.
        """
        self._pending_cancel = None
        self._cancel_fed = False
        if self._must_settle:
            await self._settle()
        turn = await self.session.begin(content)
        machine = TurnMachine(self.policy.timings, now=anyio.current_time())
        self._machine = machine
        self._closed = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, turn, on_event)
                tg.start_soon(self._clock, machine)
                await self._closed.wait()
                tg.cancel_scope.cancel()
            if on_event is not None:
                await self._flush(turn, on_event)
        finally:
            await self.session.end(turn)
        outcome = machine.outcome
        assert outcome is not None
        self._must_settle = outcome.status != "done"
        return outcome

    async def _pump(self, turn: Turn, on_event: EventSink | None) -> None:
        async for event in turn:
            await self._feed(UpdateArrived(anyio.current_time()))
            if on_event is not None:
                await on_event(event)
        try:
            response = await turn.wait()
        except AgentExitedError as exc:
            await self._feed(PromptFailed(str(exc), exc.recoverable))
        except BridgeError as exc:
            await self._feed(PromptFailed(str(exc), True))
        else:
            await self._feed(PromptAnswered(str(response.stop_reason)))

    async def _flush(self, turn: Turn, on_event: EventSink) -> None:
        """Events the turn buffered after the machine closed it, then (when a quarantine closed
        it before the agent answered) the closing of its still-open tool calls, once."""
        for event in turn.take_buffered():
            await on_event(event)
        for closed in turn.close_tool_calls("the turn was cancelled"):
            await on_event(closed)

    async def _clock(self, machine: TurnMachine) -> None:
        while True:
            self._wake = anyio.Event()
            if self._pending_cancel is not None and not self._cancel_fed:
                self._cancel_fed = True
                await self._feed(CancelRequested(self._pending_cancel, anyio.current_time()))
                continue
            deadline = machine.next_deadline()
            if deadline is None:
                await self._wake.wait()
                continue
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                await self._wake.wait()
            await self._feed(Tick(anyio.current_time()))

    async def _feed(self, event: MachineEvent) -> None:
        machine = self._machine
        assert machine is not None
        for action in machine.handle(event):
            await self._perform(action)

    async def _perform(self, action: TurnAction) -> None:
        if isinstance(action, SendCancel):
            with anyio.move_on_after(self.policy.cancel_write_timeout_s) as scope:
                await self.session.cancel()
            if scope.cancelled_caught:
                await self._feed(CancelUnwritable())
        elif isinstance(action, CancelPermissions):
            pass  # session.cancel() answers our pending permission requests ``cancelled``
        elif isinstance(action, ArmGrace):
            self._wake.set()  # the clock picks up the new deadline
        elif isinstance(action, Quarantine):
            log.warning("%s: quarantining the agent: %s", self.session.id, action.reason)
            await self.session.quarantine(action.reason)
        elif isinstance(action, Close):
            self._closed.set()

    async def _settle(self) -> None:
        """Wait for the session to be quiet (see the module docstring); bounded."""
        session = self.session
        with anyio.move_on_after(self.policy.settle_max_s) as scope:
            while True:
                seen = session.updates_seen
                await anyio.sleep(self.policy.settle_s)
                if session.updates_seen == seen:
                    return
        if scope.cancelled_caught:
            log.info("%s: still receiving late updates; starting the next turn", session.id)
