"""The conversation queue: which message is prompted next, and how each one ends. Pure.

:class:`QueueMachine` decides; an async driver performs the actions it returns (prompt, cancel,
revive the agent, persist a final state) and reports back. No I/O and no clock: every method is
synchronous and returns the actions to perform, in order. The tables are in :mod:`.queue_model`;
the state and what may be read of it (:class:`~.queue_views.QueueViews`) in :mod:`.queue_views`.

Theory of operation
-------------------
*Messages.* The caller numbers messages (``seq``: increasing, e.g. a store's row id). Each is
QUEUED, RUNNING while its prompt is out, then exactly one final state: DONE (stop reason),
CANCELLED, SUPERSEDED or FAILED (error, ``recoverable``). A final state never changes except by
``retry(seq)``: the *same* seq, as attempt n+1, at the *end* of the queue, like a fresh send (the
seq stays the caller's handle and the store updates one row). DONE cannot be retried.

*One turn at a time.* The queue holds QUEUED seqs in prompt order: a send appends, a send with
``interrupt`` goes to the front. The turn slot holds at most one turn (IDLE, STARTING, RUNNING,
CANCELLING). Every method ends with the joint rule :meth:`QueueMachine.pump`: if the slot is
IDLE, the gate OPEN, the agent not GONE and the queue not empty, pop the head and emit
:class:`StartTurn`. A send enqueues and pumps in one synchronous step, so no message can fall
between "queue empty" and "idle" (the finish gap): whichever of a send and a turn's end comes
second starts the next turn.

*Two-phase start.* From its StartTurn on, a message is the current turn, though still QUEUED
(the driver may be spawning, initializing, loading). Right before writing the prompt the driver
calls ``start_confirmed(seq, generation)``: True makes it RUNNING (persist, then prompt); False
means the start was withdrawn: do not prompt. Stop and interrupt withdraw it for good (it ends
CANCELLED / SUPERSEDED unprompted: an interrupt during a cold start really cancels). Close, or
losing the agent, puts it back at the head of the queue: it was never prompted.

*User intent wins.* ``generation`` grows with every user operation (send, stop, resume, retry,
close). A start carries the generation it was decided under, and only a confirmation carrying
the generation of the start still outstanding is accepted. A stop during an automatic rerun or
restart clears that start; as generations only grow, a late confirmation is refused even if
the same message is started again after a retry.

*Cancelling.* Interrupt, stop, close and the driver's turn deadline emit one :class:`CancelTurn`
(a second cancel adds nothing; the first reason stands). The turn still ends by ``turn_ended``,
and whatever the agent said it counts by who asked: SUPERSEDED (interrupt), CANCELLED (stop,
close), FAILED recoverable (timeout). An answer is kept as ``stop_reason``; an error during the
drain is dropped quietly. An unasked ``cancelled`` answer is CANCELLED and the queue goes on.

*Failures* (error answer, agent crash) end FAILED and are never re-sent by themselves (that can
repeat tool actions); the caller may retry. If ``recoverable`` the queue goes on, else the user
must act and the gate pauses. *The gate:* stop() pauses; a send, resume or retry opens it;
close() closes it for good (send/resume/retry then raise ResourceClosedError), and messages
never prompted stay QUEUED in the store for a later resume.

*Agent gone for good.* After ``agent_gone()`` nothing starts until the user asks for work (send,
resume, retry); the next StartTurn then follows one :class:`ReviveAgent`. If that fails, the
driver reports ``agent_gone()`` again and the loop stops again: no spin. A turn in flight still
ends by ``turn_ended`` (its request fails when the connection closes): reported exactly once.

*Steering.* :meth:`QueueMachine.steer` is a send that asks to join the running turn instead
of waiting for it. The driver first asks :meth:`QueueMachine.steer_unavailable` (under the same
step), commits the message STEERING (the turn can be joined) or QUEUED at the head (it cannot),
then calls ``steer``: a :class:`SteerTurn` (call the agent's steering method) or a
:class:`SteerFallback` (the caller is told why). The agent's answer comes back through
``steer_answered``: taken (``injected``, or any outcome we do not know) makes the message
STEERED, its own final state, with the seq of the turn it joined; refused (``failed``,
``promptRequired``, an error answer) puts it at the head of the queue, a normal message, with a
SteerFallback. A fallen-back steer goes behind the steers that fell back before it and have not
started (:meth:`QueueMachine.fallback_behind`), so steers keep their order; a refusal does not
un-pause a queue stopped since the steer was sent. A steer can only join a RUNNING turn: when
none runs, the turn is being cancelled (its grace window), the agent is restarting or
advertises no steering, or another steer's answer is awaited, it goes to the head at once.
While a steer's answer is awaited no turn starts (a steer refused because the turn just ended
is prompted next, ahead of what was queued), so a steer racing the turn's end is prompted once
or steered once, never both. An answer that never comes (``steer_unconfirmed``: a timeout, the
agent died) ends it FAILED, recoverable, with :data:`STEER_UNCONFIRMED_ERROR`: the agent may
have taken it, so it is never sent again unless the user retries it.

*Bridge crash.* :meth:`QueueMachine.restore` rebuilds from stored records; one stored RUNNING
was in flight when the bridge died: it becomes FAILED, recoverable, and the queue goes on with
the oldest message never prompted. A stored STEERING message (the bridge died between the
commit and the agent's answer) ends FAILED, recoverable, :data:`STEER_UNCONFIRMED_ERROR`: never
sent twice. There is no cursor to lose: the queue *is* the QUEUED
messages, so history is never replayed and an empty queue prompts nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from acp_bridge.conversation.queue_model import (
    AGENT_TRANSITIONS,
    BRIDGE_STOPPED_ERROR,
    GATE_TRANSITIONS,
    MESSAGE_TRANSITIONS,
    SLOT_TRANSITIONS,
    STEER_UNCONFIRMED_ERROR,
    Action,
    AgentLost,
    CancelReason,
    CancelRequested,
    CancelTurn,
    CloseRequested,
    Failed,
    Halted,
    Idle,
    IdleReason,
    MessageFinal,
    Outcome,
    RetryRequested,
    ReviveAgent,
    ReviveDecided,
    StartConfirmed,
    StartDecided,
    StartTurn,
    StartWithdrawn,
    SteerFallback,
    SteerFallbackReason,
    SteerRefused,
    SteerTaken,
    SteerTurn,
    SteerUnconfirmed,
    StopRequested,
    TurnEnded,
    TurnFailed,
    Verdict,
    WorkRequested,
    next_state,
    verdict,
)
from acp_bridge.conversation.queue_states import (
    RETRYABLE_STATES,
    AgentState,
    GateState,
    MessageRecord,
    MessageState,
    SlotState,
)
from acp_bridge.conversation.queue_views import QueueViews, TurnInSlot
from acp_bridge.errors import LocalProtocolError, ResourceClosedError

__all__ = ["QueueMachine"]


class QueueMachine(QueueViews):
    """One conversation's queue. Every method returns the actions to perform, in order.

    See the module docstring for the rules; the read-only views (``slot``, ``queued``,
    ``running``, ``message``, ``is_idle`` ...) come from :class:`~.queue_views.QueueViews`.
    Methods that take a ``seq`` raise ValueError for a seq they cannot accept; user operations
    after :meth:`close` raise ResourceClosedError.
    """

    def __init__(self) -> None:
        super().__init__()
        self._steering: tuple[int, int] | None = None
        """The steer whose answer is awaited: (its seq, the seq of the turn it aims at)."""
        self._fell_back: set[int] = set()
        """Steers that went to the head of the queue and have not started yet: a later one
        goes behind them (:meth:`fallback_behind`), so steers keep their order."""

    @classmethod
    def restore(
        cls, records: Iterable[MessageRecord], *, paused: bool = False
    ) -> tuple[QueueMachine, list[Action]]:
        """Rebuild a stored queue after the bridge (re)started.

        ``records`` are every stored message, the QUEUED ones in prompt order. Returns the
        machine and its first actions: a FAILED, recoverable :class:`MessageFinal` for each
        message that was RUNNING when the bridge died, then the StartTurn for the oldest message
        never prompted (unless ``paused``). Raises ValueError if two records share a seq.
        """
        machine = cls()
        if paused:
            machine._gate = GateState.PAUSED
        cut: list[int] = []
        unconfirmed: list[int] = []
        for stored in records:
            if stored.seq in machine._messages:
                raise ValueError(f"two stored messages have seq {stored.seq}")
            machine._messages[stored.seq] = stored
            machine._last_seq = max(machine._last_seq, stored.seq)
            if stored.state is MessageState.QUEUED:
                machine._queue.append(stored.seq)
            elif stored.state is MessageState.RUNNING:
                cut.append(stored.seq)
            elif stored.state is MessageState.STEERING:
                unconfirmed.append(stored.seq)
        machine._idle = None  # report where the restored queue stands
        actions: list[Action] = []
        crashed = TurnFailed(BRIDGE_STOPPED_ERROR["message"], recoverable=True)
        for seq in cut:
            actions += machine._finish(seq, crashed)
        for seq in unconfirmed:
            actions += machine._unconfirmed(seq)
        return machine, actions + machine.pump()

    # -- user operations --------------------------------------------------------------------

    def send(self, seq: int, *, interrupt: bool = False) -> list[Action]:
        """Queue message ``seq`` (already persisted), FIFO; un-pause a stopped queue.

        With ``interrupt`` the message goes to the front, and the current turn is cancelled
        (it ends SUPERSEDED).

        Raises:
            ResourceClosedError: after :meth:`close`.
            ValueError: ``seq`` is not an int above every seq seen so far.
        """
        self._check_open("send")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < self.next_seq:
            raise ValueError(f"send needs a new seq >= {self.next_seq}, not {seq!r}")
        self._generation += 1
        self._last_seq = seq
        self._messages[seq] = MessageRecord(seq, MessageState.QUEUED)
        actions: list[Action] = []
        if interrupt:
            self._queue.appendleft(seq)
            actions += self._cancel_current("interrupt")
        else:
            self._queue.append(seq)
        self._request_work()
        return actions + self.pump()

    def fallback_behind(self) -> tuple[int, ...]:
        """The steers a steer falling back now goes behind: those at the head of the queue that
        fell back before it (first the oldest). Changes nothing."""
        behind: list[int] = []
        for seq in self._queue:
            if seq not in self._fell_back:
                break
            behind.append(seq)
        return tuple(behind)

    def steer_unavailable(self) -> SteerFallbackReason | None:
        """Why a steer sent now could not join a turn (None: it can). Changes nothing."""
        if self._steering is not None:
            return "steer_in_flight"  # one at a time: steers reach the agent in order
        if self._slot is SlotState.CANCELLING:
            return "cancelling"
        if self._slot is not SlotState.RUNNING:
            return "no_running_turn"
        return None

    def steer(self, seq: int, *, unavailable: SteerFallbackReason | None = None) -> list[Action]:
        """Message ``seq`` (already persisted) asks to join the running turn.

        ``unavailable``: why the driver knows it cannot (the agent advertises no steering, or
        is restarting). Otherwise :meth:`steer_unavailable` decides. Joinable: the message is
        STEERING and a :class:`SteerTurn` is returned. Not: it is QUEUED at the head of the
        queue (un-pausing like a send) and a :class:`SteerFallback` says why.

        Raises:
            ResourceClosedError: after :meth:`close`.
            ValueError: ``seq`` is not an int above every seq seen so far.
        """
        self._check_open("send")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < self.next_seq:
            raise ValueError(f"steer needs a new seq >= {self.next_seq}, not {seq!r}")
        reason = unavailable or self.steer_unavailable()
        self._generation += 1
        self._last_seq = seq
        if reason is not None:
            self._messages[seq] = MessageRecord(seq, MessageState.QUEUED)
            behind = self._fall_back(seq)
            self._request_work()  # a send: it un-pauses
            return [SteerFallback(seq, reason, requeue=False, behind=behind), *self.pump()]
        into = self.running
        assert into is not None  # the slot is RUNNING
        self._messages[seq] = MessageRecord(seq, MessageState.STEERING)
        self._steering = (seq, into)
        return [SteerTurn(seq, into)]

    def steer_answered(
        self, seq: int, *, taken: bool, reason: SteerFallbackReason = "failed"
    ) -> list[Action]:
        """The agent answered steer ``seq``: ``taken`` (it is STEERED, final), or not (it goes
        to the head of the queue, ``reason`` saying why).

        Raises:
            LocalProtocolError: ``seq`` is not the steer awaiting its answer.
        """
        into = self._take_steer(seq)
        record = self._messages[seq]
        if taken:
            state = next_state(MESSAGE_TRANSITIONS, record.state, SteerTaken(seq))
            self._messages[seq] = dataclasses.replace(record, state=state)
            final = MessageFinal(seq, record.attempt, state, steered_into=into)
            return [final, *self.pump()]
        state = next_state(MESSAGE_TRANSITIONS, record.state, SteerRefused(seq))
        self._messages[seq] = dataclasses.replace(record, state=state)
        # No work requested: a stop or close since the steer was sent still holds.
        behind = self._fall_back(seq)
        return [SteerFallback(seq, reason, requeue=True, behind=behind), *self.pump()]

    def steer_unconfirmed(self, seq: int) -> list[Action]:
        """No answer to steer ``seq`` will come (a timeout, the agent died): it may have been
        taken, so it ends FAILED, recoverable, and is never sent again by itself.

        Raises:
            LocalProtocolError: ``seq`` is not the steer awaiting its answer.
        """
        self._take_steer(seq)
        return self._unconfirmed(seq) + self.pump()

    def stop(self) -> list[Action]:
        """Cancel the current turn (it ends CANCELLED) and pause: nothing more is prompted
        until :meth:`resume` or a send; a start not yet confirmed goes back to the queue. A
        no-op after :meth:`close`."""
        if self._gate is GateState.CLOSED:
            return []
        self._generation += 1
        self._gate = next_state(GATE_TRANSITIONS, self._gate, StopRequested())
        return self._cancel_current("stop") + self.pump()

    def resume(self) -> list[Action]:
        """Un-pause. Raises ResourceClosedError after :meth:`close`."""
        self._check_open("resume")
        self._generation += 1
        self._request_work()
        return self.pump()

    def retry(self, seq: int) -> list[Action]:
        """Re-queue a CANCELLED, SUPERSEDED or FAILED message at the end of the queue, as a new
        attempt with the same seq; un-pause like a send.

        Raises:
            ResourceClosedError: after :meth:`close`.
            ValueError: ``seq`` is unknown, DONE, or not final yet.
        """
        self._check_open("retry")
        record = self._messages.get(seq)
        if record is None or record.state not in RETRYABLE_STATES:
            what = "unknown" if record is None else record.state.name
            raise ValueError(f"cannot retry message {seq!r}: it is {what}")
        self._generation += 1
        state = next_state(MESSAGE_TRANSITIONS, record.state, RetryRequested(seq))
        self._messages[seq] = MessageRecord(seq, state, attempt=record.attempt + 1)
        self._queue.append(seq)
        self._request_work()
        return self.pump()

    def close(self) -> list[Action]:
        """Begin closing: no turn starts from now on; the running turn is cancelled (it ends
        CANCELLED); a start not yet confirmed goes back to the queue. Idempotent."""
        if self._gate is GateState.CLOSED:
            return []
        self._generation += 1
        self._gate = next_state(GATE_TRANSITIONS, self._gate, CloseRequested())
        return self._cancel_current("close") + self.pump()

    # -- driver feedback ---------------------------------------------------------------------

    def start_confirmed(self, seq: int, generation: int) -> bool:
        """The driver is about to write the prompt of ``seq``. True: the message is RUNNING
        now (persist, then prompt). False: the start was withdrawn; do not prompt."""
        turn = self._turn
        if turn is None or not self.is_current_start(seq, generation):
            return False
        self._slot = next_state(SLOT_TRANSITIONS, self._slot, StartConfirmed(seq))
        record = self._messages[seq]
        state = next_state(MESSAGE_TRANSITIONS, record.state, StartConfirmed(seq))
        self._messages[seq] = dataclasses.replace(record, state=state)
        return True

    def turn_ended(self, seq: int, outcome: Outcome) -> list[Action]:
        """The prompt of ``seq`` finished: answered, or failed (an error answer, a crash).

        Raises:
            LocalProtocolError: ``seq`` is not the turn in flight (each confirmed turn is
                reported ended exactly once).
        """
        turn = self._turn
        if turn is None or turn.seq != seq or self.running is None:
            raise LocalProtocolError(f"turn_ended({seq}) but the turn in flight is {self!r}")
        self._slot = next_state(SLOT_TRANSITIONS, self._slot, TurnEnded(seq, outcome))
        self._turn = None
        actions = self._finish(seq, verdict(turn.cancel, outcome))
        if turn.cancel is None and isinstance(outcome, Failed) and not outcome.recoverable:
            self._gate = next_state(GATE_TRANSITIONS, self._gate, Halted(outcome.error))
        return actions + self.pump()

    def turn_timed_out(self, seq: int) -> list[Action]:
        """The driver's deadline for the running turn ``seq`` passed: cancel it (it ends FAILED,
        recoverable). Ignored when ``seq`` is not running or already being cancelled (a timer
        that fired as the turn ended)."""
        if self._slot is not SlotState.RUNNING or self.running != seq:
            return []
        return self._cancel_current("timeout")

    def agent_gone(self) -> list[Action]:
        """The agent is gone for good (the driver gave up restarting it). Nothing starts until
        the user asks for work; a start not yet confirmed goes back to the queue."""
        self._agent = next_state(AGENT_TRANSITIONS, self._agent, AgentLost())
        if self._slot is SlotState.STARTING:
            self._queue.appendleft(self._withdraw_start().seq)
        return self.pump()

    def pump(self) -> list[Action]:
        """The joint rule: start the next queued message if nothing prevents it. Every method
        ends with it; calling it again returns nothing new (never a second StartTurn)."""
        actions: list[Action] = []
        if (
            self._slot is SlotState.IDLE
            and self._steering is None  # held: a refused steer goes first
            and self._gate is GateState.OPEN
            and self._agent is not AgentState.GONE
            and self._queue
        ):
            if self._agent is AgentState.TO_REVIVE:
                self._agent = next_state(AGENT_TRANSITIONS, self._agent, ReviveDecided())
                actions.append(ReviveAgent(self._generation))
            seq = self._queue.popleft()
            self._fell_back.discard(seq)
            self._slot = next_state(SLOT_TRANSITIONS, self._slot, StartDecided(seq))
            turn = TurnInSlot(seq, self._messages[seq].attempt, self._generation)
            self._turn = turn
            actions.append(StartTurn(turn.seq, turn.attempt, turn.generation))
        reason = self._idle_reason()
        if reason is not None and reason != self._idle:
            actions.append(Idle(reason))
        self._idle = reason
        return actions

    next_action = pump

    # -- internals ---------------------------------------------------------------------------

    def _take_steer(self, seq: int) -> int:
        steering = self._steering
        if steering is None or steering[0] != seq:
            raise LocalProtocolError(
                f"an answer to steer {seq} but the steer awaited is {steering}"
            )
        self._steering = None
        return steering[1]

    def _fall_back(self, seq: int) -> tuple[int, ...]:
        behind = self.fallback_behind()
        self._queue.insert(len(behind), seq)
        self._fell_back.add(seq)
        return behind

    def _unconfirmed(self, seq: int) -> list[Action]:
        record = self._messages[seq]
        state = next_state(MESSAGE_TRANSITIONS, record.state, SteerUnconfirmed(seq))
        failed = dataclasses.replace(
            record, state=state, error=STEER_UNCONFIRMED_ERROR, recoverable=True
        )
        self._messages[seq] = failed
        return [MessageFinal(seq, failed.attempt, state, None, STEER_UNCONFIRMED_ERROR, True)]

    def _idle_reason(self) -> IdleReason | None:
        if self._steering is not None:
            return None  # a steer's answer is awaited: it may still become a turn
        return super()._idle_reason()

    def _check_open(self, operation: str) -> None:
        if self._gate is GateState.CLOSED:
            raise ResourceClosedError(f"{operation}() after the conversation was closed")

    def _request_work(self) -> None:
        self._gate = next_state(GATE_TRANSITIONS, self._gate, WorkRequested())
        self._agent = next_state(AGENT_TRANSITIONS, self._agent, WorkRequested())

    def _cancel_current(self, reason: CancelReason) -> list[Action]:
        turn = self._turn
        if turn is None:
            return []
        if self._slot is SlotState.STARTING:
            self._withdraw_start()
            if reason in ("close", "stop"):
                # Never prompted (waiting for the agent, a restore, say): a stop or a close
                # says nothing about the message itself, which stays queued, first, for the
                # queue's resume (``run --resume``). An interrupt supersedes it.
                self._queue.appendleft(turn.seq)
                return []
            return self._finish(turn.seq, verdict(reason, None))
        self._slot = next_state(SLOT_TRANSITIONS, self._slot, CancelRequested(turn.seq, reason))
        if turn.cancel is not None:
            return []  # already being cancelled: the first reason stands
        self._turn = dataclasses.replace(turn, cancel=reason)
        return [CancelTurn(turn.seq, reason)]

    def _withdraw_start(self) -> TurnInSlot:
        turn = self._turn
        assert turn is not None
        self._slot = next_state(SLOT_TRANSITIONS, self._slot, StartWithdrawn(turn.seq))
        self._turn = None
        return turn

    def _finish(self, seq: int, judged: Verdict) -> list[Action]:
        old = self._messages[seq]
        failed = judged if isinstance(judged, TurnFailed) else None
        new = self._messages[seq] = dataclasses.replace(
            old,
            state=next_state(MESSAGE_TRANSITIONS, old.state, judged),
            stop_reason=judged.stop_reason,
            error=None if failed is None else failed.error,
            recoverable=None if failed is None else failed.recoverable,
        )
        return [
            MessageFinal(seq, new.attempt, new.state, new.stop_reason, new.error, new.recoverable)
        ]
