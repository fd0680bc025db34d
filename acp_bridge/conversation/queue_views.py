"""What a conversation queue holds, and what the driver and tests may read of it. Pure.

:class:`QueueViews` owns the state of one queue (the messages, the QUEUED seqs in prompt order,
the turn slot, the gate, the agent, the generation) and answers questions about it without
changing anything. Every change is :class:`~.queue.QueueMachine`'s, which builds on it; the rules
are in :mod:`.queue`'s theory of operation and the tables in :mod:`.queue_model`.
"""

from __future__ import annotations

from collections import deque

from acp_bridge.conversation.queue_model import CancelReason, IdleReason, StartTurn
from acp_bridge.conversation.queue_states import AgentState, GateState, MessageRecord, SlotState
from acp_bridge.record import record

__all__ = ["QueueViews", "TurnInSlot"]


@record
class TurnInSlot:
    """The turn in the slot: which attempt, the generation its start was decided under, and
    who asked to cancel it (None: nobody)."""

    seq: int
    attempt: int
    generation: int
    cancel: CancelReason | None = None


class QueueViews:
    """A queue's state and its read-only views; :class:`~.queue.QueueMachine` changes it."""

    def __init__(self) -> None:
        self._messages: dict[int, MessageRecord] = {}
        self._queue: deque[int] = deque()
        self._slot = SlotState.IDLE
        self._turn: TurnInSlot | None = None
        self._gate = GateState.OPEN
        self._agent = AgentState.ALIVE
        self._generation = 0
        self._last_seq = -1
        # The last Idle notified, until a turn starts. A new machine is trivially drained.
        self._idle: IdleReason | None = "drained"

    def __repr__(self) -> str:
        turn = "" if self._turn is None else f" seq={self._turn.seq}"
        return (
            f"<{type(self).__name__} [{self._slot.name}{turn}, {self._gate.name},"
            f" {self._agent.name}, {len(self._queue)} queued, generation {self._generation}]>"
        )

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def slot(self) -> SlotState:
        return self._slot

    @property
    def gate(self) -> GateState:
        return self._gate

    @property
    def agent(self) -> AgentState:
        return self._agent

    @property
    def queued(self) -> tuple[int, ...]:
        """QUEUED seqs in prompt order, not counting one whose start is outstanding."""
        return tuple(self._queue)

    @property
    def starting(self) -> StartTurn | None:
        """The outstanding start, if the slot is STARTING."""
        turn = self._turn
        if turn is None or self._slot is not SlotState.STARTING:
            return None
        return StartTurn(turn.seq, turn.attempt, turn.generation)

    @property
    def running(self) -> int | None:
        """The seq whose prompt is out (RUNNING or being cancelled), if any."""
        if self._turn is None or self._slot is SlotState.STARTING:
            return None
        return self._turn.seq

    @property
    def next_seq(self) -> int:
        """The smallest seq :meth:`~.queue.QueueMachine.send` accepts."""
        return self._last_seq + 1

    @property
    def is_closed(self) -> bool:
        """:meth:`~.queue.QueueMachine.close` was called: nothing is sent or started any more."""
        return self._gate is GateState.CLOSED

    def message(self, seq: int) -> MessageRecord:
        """Raises KeyError for an unknown seq."""
        return self._messages[seq]

    def messages(self) -> tuple[MessageRecord, ...]:
        return tuple(self._messages[seq] for seq in sorted(self._messages))

    def is_idle(self) -> bool:
        """True when no turn is in the slot and none will start by itself."""
        return self._idle_reason() is not None

    def is_current_start(self, seq: int, generation: int) -> bool:
        """Whether the start ``(seq, generation)`` still stands; for the driver to check after
        each await of a cold start. Commits nothing."""
        turn = self._turn
        return (
            self._slot is SlotState.STARTING
            and turn is not None
            and (turn.seq, turn.generation) == (seq, generation)
        )

    def _idle_reason(self) -> IdleReason | None:
        """Why nothing is in the slot and nothing will start by itself; None if something is or
        will (the queue has work and nothing holds it back)."""
        if self._slot is not SlotState.IDLE:
            return None
        if self._gate is GateState.CLOSED:
            return "closed"
        if self._agent is AgentState.GONE:
            return "agent_gone"
        if self._gate is GateState.PAUSED:
            return "paused"
        return None if self._queue else "drained"
