"""The turn state machine: prompt, cancel, drain, grace, quarantine. Pure: time comes in.

Theory of operation
-------------------
A turn starts PROMPTING: the ``session/prompt`` request is out. It ends exactly once, in
CLOSED, with one :class:`TurnOutcome`.

*Cancelling.* A cancel (the caller's, a stop, an interrupt, or a deadline) moves the turn to
CANCELLING and asks the driver to send ``session/cancel``, answer our pending permission
requests ``cancelled``, and arm the grace window. Whatever comes first then closes the turn,
and the caller sees it *cancelled* in every case:

* the prompt response, with any stop reason (agents often say ``end_turn``; the answer is kept
  in the outcome, the cancel is still honoured);
* an error answer (closed quietly: one outcome, no second error event);
* the grace window expiring, or the cancel notification not even being writable: the agent is
  *quarantined* (killed, restarted, its session restored before the next prompt).

A second cancel is harmless. Anything after CLOSED is ignored: a late answer never reopens a
turn.

*Deadlines* while PROMPTING: an idle deadline (reset by every update, so a long but progressing
turn is never cut) and an overall turn deadline. Either one becomes a cancel with its reason.
The driver asks :meth:`TurnMachine.next_deadline` when to wake up and feeds :class:`Tick`.

Transitions (state, event) -> (state, actions)::

    PROMPTING   PromptAnswered       -> CLOSED      Close(done)
    PROMPTING   PromptFailed         -> CLOSED      Close(failed)
    PROMPTING   TurnCancelRequested      -> CANCELLING  SendCancel, ArmGrace
    PROMPTING   Tick past a deadline -> CANCELLING  (as TurnCancelRequested, reason: the deadline)
    PROMPTING   UpdateArrived        -> PROMPTING   (idle deadline moves)
    CANCELLING  PromptAnswered       -> CLOSED      Close(cancelled, answer kept)
    CANCELLING  PromptFailed         -> CLOSED      Close(cancelled, error kept)
    CANCELLING  Tick past the grace  -> CLOSED      Quarantine, Close(cancelled, quarantined)
    CANCELLING  CancelUnwritable     -> CLOSED      Quarantine, Close(cancelled, quarantined)
    CANCELLING  TurnCancelRequested      -> CANCELLING  (nothing: a second cancel is harmless)
    CLOSED      anything             -> CLOSED      (nothing)
"""

from __future__ import annotations

import enum

from acp_bridge.record import record

__all__ = [
    "ArmGrace",
    "CancelUnwritable",
    "Close",
    "MachineEvent",
    "PromptAnswered",
    "PromptFailed",
    "Quarantine",
    "SendCancel",
    "Tick",
    "TurnAction",
    "TurnCancelRequested",
    "TurnMachine",
    "TurnOutcome",
    "TurnState",
    "TurnTimings",
    "UpdateArrived",
]


class TurnState(enum.Enum):
    PROMPTING = "prompting"
    CANCELLING = "cancelling"
    CLOSED = "closed"


@record
class TurnTimings:
    """The windows of one turn, in seconds. None disables a deadline."""

    cancel_grace_s: float = 5.0
    idle_timeout_s: float | None = None
    turn_timeout_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("cancel_grace_s", "idle_timeout_s", "turn_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0, not {value!r}")


# -- events (past tense) ----------------------------------------------------------------------


@record
class PromptAnswered:
    stop_reason: str


@record
class PromptFailed:
    error: str
    recoverable: bool


@record
class TurnCancelRequested:
    reason: str
    now: float


@record
class CancelUnwritable:
    """The ``session/cancel`` notification could not be written within its bound."""


@record
class UpdateArrived:
    now: float


@record
class Tick:
    now: float


MachineEvent = (
    PromptAnswered | PromptFailed | TurnCancelRequested | CancelUnwritable | UpdateArrived | Tick
)

# -- actions (imperative) --------------------------------------------------------------------


@record
class SendCancel:
    """Send ``session/cancel`` (bounded) and answer the turn's pending permission requests
    ``cancelled``: one action, as the client does both in one step."""


@record
class ArmGrace:
    deadline: float


@record
class Quarantine:
    reason: str


@record
class TurnOutcome:
    """How a turn ended, as the caller sees it.

    ``status`` is ``done`` (the agent answered ``stop_reason``), ``cancelled`` (for whatever
    ``cancel_reason``; ``stop_reason``/``error`` keep what the agent said, if anything), or
    ``failed`` (``error``; ``recoverable`` when the agent is being restarted).
    """

    status: str
    stop_reason: str | None = None
    error: str | None = None
    recoverable: bool = True
    cancel_reason: str | None = None
    quarantined: bool = False


@record
class Close:
    outcome: TurnOutcome


TurnAction = SendCancel | ArmGrace | Quarantine | Close


class TurnMachine:
    """One turn's state. Feed events to :meth:`handle`; perform the actions it returns."""

    def __init__(self, timings: TurnTimings, *, now: float) -> None:
        self.timings = timings
        self.state = TurnState.PROMPTING
        self.outcome: TurnOutcome | None = None
        self._started_at = now
        self._last_update_at = now
        self._grace_deadline: float | None = None
        self._cancel_reason: str | None = None

    def __repr__(self) -> str:
        return f"<TurnMachine [{self.state.name}, cancel={self._cancel_reason!r}]>"

    @property
    def cancel_reason(self) -> str | None:
        return self._cancel_reason

    def next_deadline(self) -> float | None:
        """When the driver must feed a :class:`Tick` (None: no timer runs)."""
        if self.state is TurnState.CANCELLING:
            return self._grace_deadline
        if self.state is TurnState.PROMPTING:
            deadlines = [d for d in (self._idle_deadline(), self._turn_deadline()) if d is not None]
            return min(deadlines) if deadlines else None
        return None

    def handle(self, event: MachineEvent) -> list[TurnAction]:
        if self.state is TurnState.CLOSED:
            return []
        if isinstance(event, UpdateArrived):
            self._last_update_at = max(self._last_update_at, event.now)
            return []
        if isinstance(event, PromptAnswered):  # checked early: it ends every answered turn
            return self._answered(event)
        if isinstance(event, Tick):
            return self._tick(event.now)
        if isinstance(event, TurnCancelRequested):
            return self._cancel(event.reason, event.now)
        if isinstance(event, CancelUnwritable):
            if self.state is TurnState.CANCELLING:
                return self._quarantine("the session/cancel notification could not be written")
            return []
        # PromptFailed
        if self.state is TurnState.CANCELLING:
            return self._close(
                TurnOutcome(
                    "cancelled",
                    error=event.error,
                    recoverable=event.recoverable,
                    cancel_reason=self._cancel_reason,
                )
            )
        return self._close(TurnOutcome("failed", error=event.error, recoverable=event.recoverable))

    def _answered(self, event: PromptAnswered) -> list[TurnAction]:
        if self.state is TurnState.CANCELLING:
            return self._close(
                TurnOutcome(
                    "cancelled",
                    stop_reason=event.stop_reason,
                    cancel_reason=self._cancel_reason,
                )
            )
        return self._close(TurnOutcome("done", stop_reason=event.stop_reason))

    def _tick(self, now: float) -> list[TurnAction]:
        if self.state is TurnState.CANCELLING:
            assert self._grace_deadline is not None
            if now >= self._grace_deadline:
                grace = self.timings.cancel_grace_s
                return self._quarantine(f"it did not answer a cancelled prompt within {grace:g} s")
            return []
        turn_deadline = self._turn_deadline()
        if turn_deadline is not None and now >= turn_deadline:
            return self._cancel(f"the turn ran longer than {self.timings.turn_timeout_s:g} s", now)
        idle_deadline = self._idle_deadline()
        if idle_deadline is not None and now >= idle_deadline:
            idle = self.timings.idle_timeout_s
            return self._cancel(f"the agent sent nothing for {idle:g} s", now)
        return []

    def _cancel(self, reason: str, now: float) -> list[TurnAction]:
        if self.state is not TurnState.PROMPTING:
            return []  # a second cancel is harmless
        self.state = TurnState.CANCELLING
        self._cancel_reason = reason
        self._grace_deadline = now + self.timings.cancel_grace_s
        return [SendCancel(), ArmGrace(self._grace_deadline)]

    def _quarantine(self, why: str) -> list[TurnAction]:
        outcome = TurnOutcome(
            "cancelled", cancel_reason=self._cancel_reason, quarantined=True, error=why
        )
        return [Quarantine(why), *self._close(outcome)]

    def _close(self, outcome: TurnOutcome) -> list[TurnAction]:
        self.state = TurnState.CLOSED
        self.outcome = outcome
        return [Close(outcome)]

    def _idle_deadline(self) -> float | None:
        idle = self.timings.idle_timeout_s
        return None if idle is None else self._last_update_at + idle

    def _turn_deadline(self) -> float | None:
        limit = self.timings.turn_timeout_s
        return None if limit is None else self._started_at + limit
