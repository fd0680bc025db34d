"""The queue machine's steering rules (issue 24), pure: no processes, no clock."""

from __future__ import annotations

import pytest

from acp_bridge.conversation.queue import QueueMachine
from acp_bridge.conversation.queue_model import (
    STEER_UNCONFIRMED_ERROR,
    Answered,
    CancelTurn,
    Idle,
    MessageFinal,
    StartTurn,
    SteerFallback,
    SteerTurn,
)
from acp_bridge.conversation.queue_states import MessageRecord, MessageState
from acp_bridge.errors import LocalProtocolError


def running(seq: int = 1) -> QueueMachine:
    """A machine whose message ``seq`` is RUNNING."""
    machine = QueueMachine()
    (start,) = [a for a in machine.send(seq) if isinstance(a, StartTurn)]
    assert machine.start_confirmed(seq, start.generation)
    return machine


def test_a_steer_into_a_running_turn_is_called_and_taken_ends_steered() -> None:
    machine = running()
    assert machine.steer_unavailable() is None
    assert machine.steer(2) == [SteerTurn(2, into=1)]
    assert machine.message(2).state is MessageState.STEERING
    assert machine.steer_answered(2, taken=True) == [
        MessageFinal(2, 1, MessageState.STEERED, steered_into=1)
    ]
    assert machine.turn_ended(1, Answered("end_turn"))[-1] == Idle("drained")


def test_a_refused_steer_goes_to_the_head_of_the_queue() -> None:
    machine = running()
    machine.send(2)
    machine.steer(3)
    assert machine.steer_answered(3, taken=False, reason="promptRequired") == [
        SteerFallback(3, "promptRequired", requeue=True)
    ]
    assert machine.queued == (3, 2)
    actions = machine.turn_ended(1, Answered("end_turn"))
    assert next(a for a in actions if isinstance(a, StartTurn)).seq == 3


def test_no_turn_starts_while_a_steer_answer_is_awaited() -> None:
    machine = running()
    machine.send(2)
    machine.steer(3)
    actions = machine.turn_ended(1, Answered("end_turn"))  # the turn ends first
    assert not [a for a in actions if isinstance(a, StartTurn | Idle)]
    assert not machine.is_idle()
    actions = machine.steer_answered(3, taken=False, reason="promptRequired")
    assert actions[0] == SteerFallback(3, "promptRequired", requeue=True)
    assert [a.seq for a in actions if isinstance(a, StartTurn)] == [3]  # ahead of 2


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("idle", "no_running_turn"),
        ("cancelling", "cancelling"),
        ("steering", "steer_in_flight"),
    ],
)
def test_a_steer_that_cannot_join_falls_back_at_once(setup: str, reason: str) -> None:
    machine = QueueMachine() if setup == "idle" else running()
    if setup == "cancelling":
        assert machine.stop() == [CancelTurn(1, "stop")]
    if setup == "steering":
        machine.steer(2)
    seq = machine.next_seq
    actions = machine.steer(seq)
    assert actions[0] == SteerFallback(seq, reason, requeue=False)  # type: ignore[arg-type]
    assert machine.message(seq).state is MessageState.QUEUED


def test_the_driver_knows_the_agent_cannot_steer() -> None:
    machine = running()
    assert machine.steer(2, unavailable="unsupported")[0] == SteerFallback(
        2, "unsupported", requeue=False
    )
    assert machine.queued == (2,)


def test_an_unconfirmed_steer_fails_recoverable_and_is_never_queued() -> None:
    machine = running()
    machine.steer(2)
    (final, *_) = machine.steer_unconfirmed(2)
    assert final == MessageFinal(2, 1, MessageState.FAILED, None, STEER_UNCONFIRMED_ERROR, True)
    assert machine.queued == ()


def test_a_bridge_crash_leaves_a_steering_message_failed_never_resent() -> None:
    machine, actions = QueueMachine.restore(
        [MessageRecord(1, MessageState.RUNNING), MessageRecord(2, MessageState.STEERING)]
    )
    finals = [a for a in actions if isinstance(a, MessageFinal)]
    assert [(f.seq, f.state, f.error) for f in finals][1] == (
        2,
        MessageState.FAILED,
        STEER_UNCONFIRMED_ERROR,
    )
    assert not [a for a in actions if isinstance(a, StartTurn)]
    machine.retry(2)  # on purpose only
    assert machine.queued == () and machine.starting is not None


def test_a_steered_message_cannot_be_retried_and_answers_match_the_steer() -> None:
    machine = running()
    machine.steer(2)
    with pytest.raises(LocalProtocolError):
        machine.steer_answered(3, taken=True)
    machine.steer_answered(2, taken=True)
    with pytest.raises(ValueError, match="STEERED"):
        machine.retry(2)


def test_steers_that_fall_back_keep_their_order_ahead_of_the_queue() -> None:
    machine = running()
    machine.send(2)
    machine.steer(3)
    assert machine.steer_answered(3, taken=False)[0] == SteerFallback(3, "failed", True, ())
    machine.steer(4)  # joins the turn, is refused too: behind 3, still ahead of 2
    assert machine.fallback_behind() == (3,)
    assert machine.steer_answered(4, taken=False)[0] == SteerFallback(4, "failed", True, (3,))
    machine.stop()  # cancelling: a steer now falls back at once, behind 3 and 4
    assert machine.steer(5)[0] == SteerFallback(5, "cancelling", False, (3, 4))
    assert machine.queued == (3, 4, 5, 2)


def test_a_refused_steer_does_not_unpause_a_stopped_queue() -> None:
    machine = running()
    machine.steer(2)
    machine.stop()
    machine.turn_ended(1, Answered("cancelled"))
    actions = machine.steer_answered(2, taken=False, reason="promptRequired")
    assert actions == [SteerFallback(2, "promptRequired", True, ()), Idle("paused")]
    assert machine.queued == (2,)
