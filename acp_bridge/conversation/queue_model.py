"""The conversation queue's vocabulary: states, events, actions and transition tables. Pure data.

:mod:`acp_bridge.conversation.queue` explains how these fit together; this module names them and
holds the tables. A conversation is four small machines, each with its own table (the way h11
keeps one table per role), joined by one rule in :class:`~.queue.QueueMachine`:

* each *message* goes QUEUED -> RUNNING -> one final state, or, sent as a steer, STEERING ->
  STEERED (or back to QUEUED when the agent did not take it) (:data:`MESSAGE_TRANSITIONS`);
* the *turn slot* holds at most one turn, IDLE -> STARTING -> RUNNING -> CANCELLING -> IDLE
  (:data:`SLOT_TRANSITIONS`);
* the *gate* says whether the user lets turns start: OPEN, PAUSED or CLOSED
  (:data:`GATE_TRANSITIONS`);
* the *agent* is ALIVE, GONE for good, or GONE with a user request that will revive it
  (:data:`AGENT_TRANSITIONS`).

A (state, event type) pair missing from a table is a transition that must never happen;
:func:`next_state` raises :class:`LocalProtocolError` for it. The machine validates what callers
pass in before it steps, so reaching that error is a bug in the machine itself.

The tables below are the chart: one line per transition, with why it happens. The four
machines' states and :class:`~.queue_states.MessageRecord` live in :mod:`.queue_states`, and are
imported from there.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, Literal, TypeVar

from acp_bridge.conversation.queue_states import AgentState, GateState, MessageState, SlotState
from acp_bridge.errors import LocalProtocolError
from acp_bridge.record import record

__all__ = [
    "AGENT_TRANSITIONS",
    "BRIDGE_STOPPED_ERROR",
    "GATE_TRANSITIONS",
    "MESSAGE_TRANSITIONS",
    "SLOT_TRANSITIONS",
    "STEER_UNCONFIRMED_ERROR",
    "TIMEOUT_ERROR",
    "Action",
    "AgentLost",
    "Answered",
    "CancelReason",
    "CancelRequested",
    "CancelTurn",
    "CloseRequested",
    "Event",
    "Failed",
    "Halted",
    "Idle",
    "IdleReason",
    "MessageFinal",
    "Outcome",
    "RetryRequested",
    "ReviveAgent",
    "ReviveDecided",
    "StartConfirmed",
    "StartDecided",
    "StartTurn",
    "StartWithdrawn",
    "SteerFallback",
    "SteerFallbackReason",
    "SteerRefused",
    "SteerTaken",
    "SteerTurn",
    "SteerUnconfirmed",
    "StopRequested",
    "TurnCompleted",
    "TurnEnded",
    "TurnFailed",
    "TurnSuperseded",
    "Verdict",
    "VerdictCancelled",
    "WorkRequested",
    "next_state",
    "verdict",
]

TIMEOUT_ERROR = "the turn ran past its deadline"
BRIDGE_STOPPED_ERROR: Final[Mapping[str, str]] = {
    "code": "bridge_stopped",
    "message": "the bridge stopped during this turn",
}
"""The error of a message that was running when the bridge process itself died (a crash: a
clean stop records the message cancelled instead). Stored as is; the machine uses its message."""

STEER_UNCONFIRMED_ERROR = "steer unconfirmed"
"""The error of a steered message whose answer never came (the bridge died, the agent died,
or the answer timed out): the agent may have taken it, so it is never sent again by itself
(failed, recoverable: the user may retry it, as a prompt of its own)."""

SteerFallbackReason = Literal[
    "unsupported",
    "agent_restarting",
    "no_running_turn",
    "cancelling",
    "steer_in_flight",
    "failed",
    "promptRequired",
]
"""Why a steer went to the queue's head instead: the agent advertises no steering, it is
(re)starting, no turn runs, the running turn is being cancelled (the grace window), another
steer's answer is awaited, or the agent answered ``failed`` / ``promptRequired`` (or an
error)."""

CancelReason = Literal["interrupt", "stop", "close", "timeout"]
"""Who asked for a cancel: a send with interrupt, stop(), close(), or the driver's turn deadline."""
IdleReason = Literal["drained", "paused", "agent_gone", "closed"]
"""Why no turn runs or starts: nothing queued, the user stopped, the agent is gone, closed."""


# -- what the driver reports about a turn -----------------------------------------------------


@record
class Answered:
    """The agent answered the prompt with ``stop_reason``."""

    stop_reason: str


@record
class Failed:
    """The prompt failed: an error answer, or the agent crashed mid-turn."""

    error: str
    recoverable: bool


Outcome = Answered | Failed


# -- events (past tense); the tables are keyed by their types ---------------------------------


class Event:
    """Base of the events the tables know. Only the type matters to a table."""

    __slots__ = ()


@record
class WorkRequested(Event):
    """The user asked for turns: a send, a resume or a retry."""


@record
class StopRequested(Event):
    pass


@record
class CloseRequested(Event):
    pass


@record
class RetryRequested(Event):
    seq: int


@record
class Halted(Event):
    """A turn failed in a way the user must fix (``recoverable=False``)."""

    error: str


@record
class AgentLost(Event):
    """The driver gave up on the agent (restart limit, auth required, ...)."""


@record
class ReviveDecided(Event):
    pass


@record
class StartDecided(Event):
    seq: int


@record
class StartConfirmed(Event):
    seq: int


@record
class StartWithdrawn(Event):
    seq: int


@record
class CancelRequested(Event):
    seq: int
    reason: CancelReason


@record
class TurnEnded(Event):
    seq: int
    outcome: Outcome


@record
class SteerTaken(Event):
    """The agent took the steer (``injected``, or any outcome we do not know)."""

    seq: int


@record
class SteerRefused(Event):
    """The agent did not take the steer (``failed``, ``promptRequired``, an error answer)."""

    seq: int


@record
class SteerUnconfirmed(Event):
    """No answer to the steer will come: it may or may not have been taken."""

    seq: int


# Verdicts: how a message's turn counts, decided from the outcome and who asked for a cancel.
@record
class TurnCompleted(Event):
    stop_reason: str


@record
class VerdictCancelled(Event):
    """The turn counts as cancelled: a stop or close asked for it, or the agent answered
    ``cancelled`` by itself. (Not :class:`acp_bridge.agents.tool_runner.TurnCancelled`, the
    built-in agent's exception.)"""

    stop_reason: str | None = None


@record
class TurnSuperseded(Event):
    stop_reason: str | None = None


@record
class TurnFailed(Event):
    error: str
    recoverable: bool
    stop_reason: str | None = None


Verdict = TurnCompleted | VerdictCancelled | TurnSuperseded | TurnFailed


# -- actions (imperative) ---------------------------------------------------------------------


@record
class StartTurn:
    """Prompt message ``seq``: bring the agent up if needed, then call
    ``start_confirmed(seq, generation)`` right before writing the prompt, and prompt only if it
    returns True. ``attempt`` counts from 1; a retry makes a new attempt."""

    seq: int
    attempt: int
    generation: int


@record
class CancelTurn:
    """Cancel the turn of ``seq`` (session/cancel and the grace window); report its end with
    ``turn_ended`` as usual."""

    seq: int
    reason: CancelReason


@record
class ReviveAgent:
    """The agent was gone for good and the user asked for more: start a fresh agent and restore
    the session. Always followed by the StartTurn it is for, with the same generation."""

    generation: int


@record
class MessageFinal:
    """Message ``seq`` reached a final state: persist it, then emit the caller's event."""

    seq: int
    attempt: int
    state: MessageState
    stop_reason: str | None = None
    error: str | None = None
    recoverable: bool | None = None
    steered_into: int | None = None
    """For STEERED: the seq of the turn the message joined."""


@record
class SteerTurn:
    """Call the agent's steering method with message ``seq`` (STEERING, committed), aimed at
    the running turn of ``into``; report the answer with ``steer_answered``."""

    seq: int
    into: int


@record
class SteerFallback:
    """Steer ``seq`` went to the head of the queue, a normal QUEUED message, for ``reason``:
    persist that (``requeue``: it was stored STEERING) and tell the caller."""

    seq: int
    reason: SteerFallbackReason
    requeue: bool
    behind: tuple[int, ...] = ()
    """The steers at the head of the queue it goes behind (they fell back before it)."""


@record
class Idle:
    """Nothing runs and nothing will start by itself (a notification; the driver keeps
    listening for user operations unless ``reason`` is ``closed``)."""

    reason: IdleReason


Action = StartTurn | CancelTurn | ReviveAgent | MessageFinal | Idle | SteerTurn | SteerFallback


# -- transition tables: (state, event type) -> state ------------------------------------------

_Q, _R = MessageState.QUEUED, MessageState.RUNNING

MESSAGE_TRANSITIONS: Mapping[tuple[MessageState, type[Event]], MessageState] = {
    (_Q, StartConfirmed): _R,
    # Withdrawn while its StartTurn was out (the agent cold-starting): it counts as the turn.
    (_Q, TurnSuperseded): MessageState.SUPERSEDED,
    (_Q, VerdictCancelled): MessageState.CANCELLED,
    (_R, TurnCompleted): MessageState.DONE,
    (_R, VerdictCancelled): MessageState.CANCELLED,
    (_R, TurnSuperseded): MessageState.SUPERSEDED,
    (_R, TurnFailed): MessageState.FAILED,  # error, agent crash, timeout, bridge crash
    # A final state is left only by an explicit retry, and never from DONE.
    (MessageState.CANCELLED, RetryRequested): _Q,
    (MessageState.SUPERSEDED, RetryRequested): _Q,
    (MessageState.FAILED, RetryRequested): _Q,
    # A steer: committed STEERING before the call goes out; the agent's answer decides.
    (MessageState.STEERING, SteerTaken): MessageState.STEERED,
    (MessageState.STEERING, SteerRefused): _Q,  # to the head of the queue
    (MessageState.STEERING, SteerUnconfirmed): MessageState.FAILED,  # never sent again
}

_IDLE, _STARTING = SlotState.IDLE, SlotState.STARTING
_RUNNING, _CANCELLING = SlotState.RUNNING, SlotState.CANCELLING

SLOT_TRANSITIONS: Mapping[tuple[SlotState, type[Event]], SlotState] = {
    (_IDLE, StartDecided): _STARTING,
    (_STARTING, StartConfirmed): _RUNNING,
    (_STARTING, StartWithdrawn): _IDLE,  # stop, interrupt or close; agent lost
    (_RUNNING, CancelRequested): _CANCELLING,
    (_CANCELLING, CancelRequested): _CANCELLING,  # a second cancel: nothing new
    (_RUNNING, TurnEnded): _IDLE,
    (_CANCELLING, TurnEnded): _IDLE,
}

_OPEN, _PAUSED, _CLOSED = GateState.OPEN, GateState.PAUSED, GateState.CLOSED

GATE_TRANSITIONS: Mapping[tuple[GateState, type[Event]], GateState] = {
    (_OPEN, WorkRequested): _OPEN,
    (_PAUSED, WorkRequested): _OPEN,  # a send, resume or retry un-pauses
    (_OPEN, StopRequested): _PAUSED,
    (_PAUSED, StopRequested): _PAUSED,
    (_CLOSED, StopRequested): _CLOSED,
    (_OPEN, Halted): _PAUSED,
    (_PAUSED, Halted): _PAUSED,
    (_CLOSED, Halted): _CLOSED,
    (_OPEN, CloseRequested): _CLOSED,
    (_PAUSED, CloseRequested): _CLOSED,
    (_CLOSED, CloseRequested): _CLOSED,
    # (CLOSED, WorkRequested) is missing on purpose: the machine raises ResourceClosedError.
}

_ALIVE, _GONE, _TO_REVIVE = AgentState.ALIVE, AgentState.GONE, AgentState.TO_REVIVE

AGENT_TRANSITIONS: Mapping[tuple[AgentState, type[Event]], AgentState] = {
    (_ALIVE, AgentLost): _GONE,
    (_GONE, AgentLost): _GONE,
    (_TO_REVIVE, AgentLost): _GONE,
    (_ALIVE, WorkRequested): _ALIVE,
    (_GONE, WorkRequested): _TO_REVIVE,  # only a user request revives: no spin
    (_TO_REVIVE, WorkRequested): _TO_REVIVE,
    (_TO_REVIVE, ReviveDecided): _ALIVE,
}

S = TypeVar("S", bound=enum.Enum)


def next_state(table: Mapping[tuple[S, type[Event]], S], state: S, event: Event) -> S:
    """The state after ``event``.

    Raises:
        LocalProtocolError: the table has no such transition (a bug in the machine).
    """
    try:
        return table[state, type(event)]
    except KeyError:
        raise LocalProtocolError(f"{type(event).__name__} while {state.name}") from None


def verdict(cancel: CancelReason | None, outcome: Outcome | None) -> Verdict:
    """How a turn counts: by who asked for a cancel, if anyone did, else by its outcome.

    ``outcome`` is None for a start withdrawn before the prompt went out. An answer is kept as
    ``stop_reason`` whatever the verdict; an error during a cancel's drain is dropped quietly.
    """
    stop_reason = outcome.stop_reason if isinstance(outcome, Answered) else None
    if cancel == "interrupt":
        return TurnSuperseded(stop_reason)
    if cancel in ("stop", "close"):
        return VerdictCancelled(stop_reason)
    if cancel == "timeout":
        return TurnFailed(TIMEOUT_ERROR, recoverable=True, stop_reason=stop_reason)
    if isinstance(outcome, Failed):
        return TurnFailed(outcome.error, outcome.recoverable)
    if outcome is None:
        raise LocalProtocolError("a turn nobody cancelled ended without an outcome")
    if outcome.stop_reason == "cancelled":  # the agent cancelled by itself: the queue goes on
        return VerdictCancelled(outcome.stop_reason)
    return TurnCompleted(outcome.stop_reason)
