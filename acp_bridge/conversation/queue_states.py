"""The conversation queue's states and the message record: pure data, no I/O.

The four machines of :mod:`acp_bridge.conversation.queue_model` each have a state here: a
message (:class:`MessageState`, with the final and retryable sets), the turn slot
(:class:`SlotState`), the gate (:class:`GateState`) and the agent (:class:`AgentState`).
:class:`MessageRecord` is one message as the machine sees it and as a store persists it.
This module is the one home of these names: import them from here.
"""

from __future__ import annotations

import enum

from acp_bridge.record import record

__all__ = [
    "FINAL_STATES",
    "RETRYABLE_STATES",
    "AgentState",
    "GateState",
    "MessageRecord",
    "MessageState",
    "SlotState",
]


class MessageState(enum.StrEnum):
    """Where a message is: waiting, being prompted, being steered into the running turn, or
    one of the five final states. The values are what the store keeps.

    STEERING: the message was committed and the agent's steering method was (or is about to
    be) called with it; STEERED: the agent took it into a running turn (its final state: it is
    never prompted by itself). See :mod:`.queue` ("Steering")."""

    QUEUED = "queued"
    RUNNING = "running"
    STEERING = "steering"
    DONE = "done"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    FAILED = "failed"
    STEERED = "steered"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset(
    {
        MessageState.DONE,
        MessageState.CANCELLED,
        MessageState.SUPERSEDED,
        MessageState.FAILED,
        MessageState.STEERED,
    }
)
RETRYABLE_STATES = FINAL_STATES - {MessageState.DONE, MessageState.STEERED}
"""A delivered message (DONE, or STEERED into a turn) is never sent again, even when asked."""


class SlotState(enum.Enum):
    IDLE = "idle"  # no turn
    STARTING = "starting"  # StartTurn is out; the driver may be cold-starting the agent
    RUNNING = "running"  # the prompt went out
    CANCELLING = "cancelling"  # CancelTurn is out; waiting for the turn to end


class GateState(enum.Enum):
    OPEN = "open"
    PAUSED = "paused"
    CLOSED = "closed"


class AgentState(enum.Enum):
    ALIVE = "alive"
    GONE = "gone"  # gone for good: nothing starts by itself
    TO_REVIVE = "to_revive"  # gone, but the user asked for work since: revive before the next turn


@record
class MessageRecord:
    """One message as the machine sees it (and as a store persists it).

    ``stop_reason`` is what the agent answered, if it answered (kept even when the turn counts
    as cancelled); ``error`` and ``recoverable`` are set for FAILED only.
    """

    seq: int
    state: MessageState
    attempt: int = 1
    stop_reason: str | None = None
    error: str | None = None
    recoverable: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0:
            raise ValueError(f"seq must be an int >= 0, not {self.seq!r}")
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"attempt must be an int >= 1, not {self.attempt!r}")
        failed = self.state is MessageState.FAILED
        if failed != (self.error is not None) or failed != (self.recoverable is not None):
            raise ValueError(f"error and recoverable go with FAILED and only FAILED: {self!r}")
