"""The turn state machine: prompt, cancel, drain, grace, quarantine. Pure: time comes in.

Theory of operation
-------------------
A turn starts STARTING: it exists (a cancel can reach it) while its ``session/prompt`` is being
written. ``PromptSent`` makes it PROMPTING. It ends exactly once, in CLOSED, with one
:class:`TurnOutcome` that says how it ended (:class:`TurnStatus`) and who ended it
(:class:`EndedBy`).

*The early cancel.* A cancel that comes before the prompt is out (a stop while the turn is
being started) moves the turn to CANCEL_AT_START: nothing can be cancelled at the agent yet, so
nothing is done, and the cancel goes out the moment the prompt has (``PromptSent`` then acts as
a cancel in PROMPTING would). The prompt is still sent: a start cannot be taken back once its
write may have begun, and a cancel right behind it costs a cooperative agent nothing.

*Cancelling.* A cancel (the caller's, a stop, an interrupt, a close, the editor's, or a
deadline) moves the turn to CANCELLING and asks the performer to send ``session/cancel``,
answer our pending permission requests ``cancelled``, and arm the grace window. Whatever comes
first then closes the turn, and it ends *cancelled*, by whoever asked, in every case:

* the prompt response, with any stop reason (agents often say ``end_turn``; the answer is kept
  in the outcome, the cancel is still honoured);
* an error answer (closed quietly: one outcome, no second error event);
* the grace window expiring, or the cancel notification not even being writable: the agent is
  *quarantined* (killed, restarted, its session restored before the next prompt), and the
  outcome says so (``quarantined``) while keeping who asked for the cancel.

A second cancel is harmless (the first one's asker stands). Anything after CLOSED is ignored: a
late answer never reopens a turn.

*Deadlines* while PROMPTING, counted from ``PromptSent``: an idle deadline (reset by every
update, so a long but progressing turn is never cut) and an overall turn deadline. Either one
becomes a cancel by :attr:`EndedBy.IDLE_DEADLINE` or :attr:`EndedBy.TURN_DEADLINE`. The
performer asks :meth:`TurnMachine.next_deadline` when to wake up and feeds :class:`Tick`.

Transitions (state, event) -> state, actions; :data:`TRANSITIONS` is this table as data, one
handler per pair, and every pair is in it::

    STARTING         PromptSent           -> PROMPTING        the deadlines start
    STARTING         TurnCancelRequested  -> CANCEL_AT_START  (nothing yet: no prompt is out)
    STARTING         PromptAnswered       -> CLOSED           Close(done)
    STARTING         PromptFailed         -> CLOSED           Close(failed)
    STARTING         UpdateArrived        -> STARTING         (nothing)
    STARTING         Tick                 -> STARTING         (nothing: no deadline runs yet)
    STARTING         CancelUnwritable     -> STARTING         (nothing: no cancel was sent)
    CANCEL_AT_START  PromptSent           -> CANCELLING       SendCancel, ArmGrace
    CANCEL_AT_START  PromptAnswered       -> CLOSED           Close(cancelled, answer kept)
    CANCEL_AT_START  PromptFailed         -> CLOSED           Close(cancelled, error kept)
    CANCEL_AT_START  TurnCancelRequested  -> CANCEL_AT_START  (nothing: a second cancel)
    CANCEL_AT_START  UpdateArrived        -> CANCEL_AT_START  (nothing)
    CANCEL_AT_START  Tick                 -> CANCEL_AT_START  (nothing)
    CANCEL_AT_START  CancelUnwritable     -> CANCEL_AT_START  (nothing: no cancel was sent)
    PROMPTING        PromptAnswered       -> CLOSED           Close(done)
    PROMPTING        PromptFailed         -> CLOSED           Close(failed)
    PROMPTING        TurnCancelRequested  -> CANCELLING       SendCancel, ArmGrace
    PROMPTING        Tick                 -> CANCELLING       past a deadline, as a cancel by it
    PROMPTING        UpdateArrived        -> PROMPTING        (the idle deadline moves)
    PROMPTING        PromptSent           -> PROMPTING        (nothing: sent once)
    PROMPTING        CancelUnwritable     -> PROMPTING        (nothing: no cancel was sent)
    CANCELLING       PromptAnswered       -> CLOSED           Close(cancelled, answer kept)
    CANCELLING       PromptFailed         -> CLOSED           Close(cancelled, error kept)
    CANCELLING       Tick                 -> CLOSED           past the grace: Quarantine, Close
    CANCELLING       CancelUnwritable     -> CLOSED           Quarantine, Close(cancelled)
    CANCELLING       TurnCancelRequested  -> CANCELLING       (nothing: a second cancel)
    CANCELLING       UpdateArrived        -> CANCELLING       (nothing)
    CANCELLING       PromptSent           -> CANCELLING       (nothing)
    CLOSED           anything             -> CLOSED           (nothing)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Final

from acp_bridge.record import record

__all__ = [
    "EVENT_TYPES",
    "TRANSITIONS",
    "ArmGrace",
    "CancelUnwritable",
    "Close",
    "EndedBy",
    "MachineEvent",
    "PromptAnswered",
    "PromptFailed",
    "PromptSent",
    "Quarantine",
    "SendCancel",
    "Tick",
    "TurnAction",
    "TurnCancelRequested",
    "TurnMachine",
    "TurnOutcome",
    "TurnState",
    "TurnStatus",
    "TurnTimings",
    "UpdateArrived",
]


class TurnState(enum.Enum):
    STARTING = "starting"
    CANCEL_AT_START = "cancel_at_start"
    PROMPTING = "prompting"
    CANCELLING = "cancelling"
    CLOSED = "closed"


class TurnStatus(enum.Enum):
    """How a turn ended."""

    DONE = "done"
    """The agent answered, and nobody had cancelled the turn."""
    CANCELLED = "cancelled"
    """Somebody cancelled it (:attr:`TurnOutcome.ended_by` says who)."""
    FAILED = "failed"
    """An error answer, or the agent died mid-turn."""


class EndedBy(enum.Enum):
    """Who ended a turn. A cancelled turn keeps who asked for the cancel, also when the grace
    window then ran out and the agent was quarantined (:attr:`TurnOutcome.quarantined`)."""

    AGENT = "agent"
    """The agent's answer or error answer, with nobody cancelling."""
    CRASH = "crash"
    """The agent process ended during the turn."""
    CALLER = "caller"
    """The caller: ``Session.cancel``, or leaving the turn before it ended."""
    IDLE_DEADLINE = "idle_deadline"
    """The agent sent nothing for the turn's ``idle_timeout_s``."""
    TURN_DEADLINE = "turn_deadline"
    """The turn ran longer than its ``turn_timeout_s``."""
    INTERRUPT = "interrupt"
    """The conversation: a message sent with ``interrupt``."""
    STOP = "stop"
    """The conversation: ``stop()``."""
    CLOSE = "close"
    """The session or the conversation was closed."""
    EDITOR = "editor"
    """The proxy: the editor's ``session/cancel``."""

    @property
    def is_deadline(self) -> bool:
        return self is EndedBy.IDLE_DEADLINE or self is EndedBy.TURN_DEADLINE


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
class PromptSent:
    """The ``session/prompt`` request is written: the agent may be working on it."""

    now: float


@record
class PromptAnswered:
    stop_reason: str


@record
class PromptFailed:
    error: str
    recoverable: bool
    crashed: bool = False
    """The agent process ended (else it answered with an error)."""


@record
class TurnCancelRequested:
    by: EndedBy
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
    PromptSent
    | PromptAnswered
    | PromptFailed
    | TurnCancelRequested
    | CancelUnwritable
    | UpdateArrived
    | Tick
)
EVENT_TYPES: Final[tuple[type[MachineEvent], ...]] = (
    PromptSent,
    PromptAnswered,
    PromptFailed,
    TurnCancelRequested,
    CancelUnwritable,
    UpdateArrived,
    Tick,
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

    ``status`` :attr:`~TurnStatus.DONE`: the agent answered ``stop_reason``.
    :attr:`~TurnStatus.CANCELLED`: ``ended_by`` asked for it; ``stop_reason``/``error`` keep
    what the agent said, if anything; ``quarantined`` when it did not answer within the grace
    window (or the cancel could not be written) and was replaced. :attr:`~TurnStatus.FAILED`:
    ``error``, by the agent's answer or its crash (``ended_by``); ``recoverable`` when the agent
    is being restarted. ``reason`` says why in words, for logs and messages: code decides on
    ``status`` and ``ended_by``.
    """

    status: TurnStatus
    ended_by: EndedBy
    stop_reason: str | None = None
    error: str | None = None
    recoverable: bool = True
    quarantined: bool = False
    reason: str | None = None


@record
class Close:
    outcome: TurnOutcome


TurnAction = SendCancel | ArmGrace | Quarantine | Close

_CANCEL_TEXT: Final[Mapping[EndedBy, str]] = {
    EndedBy.CALLER: "the caller cancelled the turn",
    EndedBy.INTERRUPT: "a message interrupted the turn",
    EndedBy.STOP: "the conversation was stopped",
    EndedBy.CLOSE: "the session was closed",
    EndedBy.EDITOR: "the editor cancelled the turn",
}


class TurnMachine:
    """One turn's state. Feed events to :meth:`handle`; perform the actions it returns."""

    def __init__(self, timings: TurnTimings) -> None:
        self.timings = timings
        self.state = TurnState.STARTING
        self.outcome: TurnOutcome | None = None
        self._started_at = 0.0
        self._last_update_at = 0.0
        self._grace_deadline: float | None = None
        self._cancelled_by: EndedBy | None = None
        self._reason: str | None = None

    def __repr__(self) -> str:
        by = None if self._cancelled_by is None else self._cancelled_by.name
        return f"<TurnMachine [{self.state.name}, cancelled by {by}]>"

    @property
    def cancelled_by(self) -> EndedBy | None:
        """Who asked for a cancel (None: nobody did)."""
        return self._cancelled_by

    def next_deadline(self) -> float | None:
        """When the performer must feed a :class:`Tick` (None: no timer runs)."""
        if self.state is TurnState.CANCELLING:
            return self._grace_deadline
        if self.state is TurnState.PROMPTING:
            idle, turn = self._idle_deadline(), self._turn_deadline()
            if idle is None or turn is None:
                return turn if idle is None else idle
            return min(idle, turn)
        return None

    def handle(self, event: MachineEvent) -> list[TurnAction]:
        return TRANSITIONS[self.state, type(event)](self, event)

    # -- handlers: one per row of the table ----------------------------------------------------

    def _nothing(self, event: MachineEvent) -> list[TurnAction]:
        return []

    def _sent(self, event: PromptSent) -> list[TurnAction]:
        self.state = TurnState.PROMPTING
        self._started_at = self._last_update_at = event.now
        return []

    def _sent_after_a_cancel(self, event: PromptSent) -> list[TurnAction]:
        self._started_at = self._last_update_at = event.now
        return self._cancelling(event.now)

    def _cancel_at_start(self, event: TurnCancelRequested) -> list[TurnAction]:
        self.state = TurnState.CANCEL_AT_START
        self._note_cancel(event.by, _CANCEL_TEXT.get(event.by, event.by.value))
        return []

    def _cancel(self, event: TurnCancelRequested) -> list[TurnAction]:
        self._note_cancel(event.by, _CANCEL_TEXT.get(event.by, event.by.value))
        return self._cancelling(event.now)

    def _update(self, event: UpdateArrived) -> list[TurnAction]:
        self._last_update_at = max(self._last_update_at, event.now)
        return []

    def _answered(self, event: PromptAnswered) -> list[TurnAction]:
        return self._close(TurnOutcome(TurnStatus.DONE, EndedBy.AGENT, event.stop_reason))

    def _answered_a_cancel(self, event: PromptAnswered) -> list[TurnAction]:
        return self._close(self._cancelled(stop_reason=event.stop_reason))

    def _failed(self, event: PromptFailed) -> list[TurnAction]:
        by = EndedBy.CRASH if event.crashed else EndedBy.AGENT
        outcome = TurnOutcome(
            TurnStatus.FAILED, by, error=event.error, recoverable=event.recoverable
        )
        return self._close(outcome)

    def _failed_a_cancel(self, event: PromptFailed) -> list[TurnAction]:
        return self._close(self._cancelled(error=event.error, recoverable=event.recoverable))

    def _deadline_tick(self, event: Tick) -> list[TurnAction]:
        now = event.now
        turn_deadline = self._turn_deadline()
        if turn_deadline is not None and now >= turn_deadline:
            limit = self.timings.turn_timeout_s
            self._note_cancel(EndedBy.TURN_DEADLINE, f"the turn ran longer than {limit:g} s")
            return self._cancelling(now)
        idle_deadline = self._idle_deadline()
        if idle_deadline is not None and now >= idle_deadline:
            idle = self.timings.idle_timeout_s
            self._note_cancel(EndedBy.IDLE_DEADLINE, f"the agent sent nothing for {idle:g} s")
            return self._cancelling(now)
        return []

    def _grace_tick(self, event: Tick) -> list[TurnAction]:
        assert self._grace_deadline is not None
        if event.now < self._grace_deadline:
            return []
        grace = self.timings.cancel_grace_s
        return self._quarantine(f"it did not answer a cancelled prompt within {grace:g} s")

    def _unwritable(self, event: CancelUnwritable) -> list[TurnAction]:
        return self._quarantine("the session/cancel notification could not be written")

    # -- helpers ---------------------------------------------------------------------------

    def _note_cancel(self, by: EndedBy, reason: str) -> None:
        self._cancelled_by = by
        self._reason = reason

    def _cancelling(self, now: float) -> list[TurnAction]:
        self.state = TurnState.CANCELLING
        self._grace_deadline = now + self.timings.cancel_grace_s
        return [SendCancel(), ArmGrace(self._grace_deadline)]

    def _cancelled(
        self,
        *,
        stop_reason: str | None = None,
        error: str | None = None,
        recoverable: bool = True,
        quarantined: bool = False,
    ) -> TurnOutcome:
        assert self._cancelled_by is not None
        return TurnOutcome(
            TurnStatus.CANCELLED,
            self._cancelled_by,
            stop_reason=stop_reason,
            error=error,
            recoverable=recoverable,
            quarantined=quarantined,
            reason=self._reason,
        )

    def _quarantine(self, why: str) -> list[TurnAction]:
        return [Quarantine(why), *self._close(self._cancelled(error=why, quarantined=True))]

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


_Handler = Callable[[TurnMachine, Any], list[TurnAction]]

_S, _A, _P = TurnState.STARTING, TurnState.CANCEL_AT_START, TurnState.PROMPTING
_C, _X = TurnState.CANCELLING, TurnState.CLOSED
_M = TurnMachine

TRANSITIONS: Final[Mapping[tuple[TurnState, type[MachineEvent]], _Handler]] = {
    # STARTING: the prompt is being written.
    (_S, PromptSent): _M._sent,
    (_S, TurnCancelRequested): _M._cancel_at_start,
    (_S, PromptAnswered): _M._answered,  # read before the write returned
    (_S, PromptFailed): _M._failed,
    (_S, UpdateArrived): _M._nothing,
    (_S, Tick): _M._nothing,
    (_S, CancelUnwritable): _M._nothing,
    # CANCEL_AT_START: the early cancel, sent once the prompt is.
    (_A, PromptSent): _M._sent_after_a_cancel,
    (_A, PromptAnswered): _M._answered_a_cancel,
    (_A, PromptFailed): _M._failed_a_cancel,
    (_A, TurnCancelRequested): _M._nothing,
    (_A, UpdateArrived): _M._nothing,
    (_A, Tick): _M._nothing,
    (_A, CancelUnwritable): _M._nothing,
    # PROMPTING: the deadlines run.
    (_P, PromptAnswered): _M._answered,
    (_P, PromptFailed): _M._failed,
    (_P, TurnCancelRequested): _M._cancel,
    (_P, Tick): _M._deadline_tick,
    (_P, UpdateArrived): _M._update,
    (_P, PromptSent): _M._nothing,
    (_P, CancelUnwritable): _M._nothing,
    # CANCELLING: the grace window runs.
    (_C, PromptAnswered): _M._answered_a_cancel,
    (_C, PromptFailed): _M._failed_a_cancel,
    (_C, Tick): _M._grace_tick,
    (_C, CancelUnwritable): _M._unwritable,
    (_C, TurnCancelRequested): _M._nothing,
    (_C, UpdateArrived): _M._nothing,
    (_C, PromptSent): _M._nothing,
    # CLOSED: nothing reopens a turn.
    **{(_X, event_type): _M._nothing for event_type in EVENT_TYPES},
}
"""Every (state, event type) pair and its handler: the table of the module docstring."""
