"""The turn state machine, driven by events alone: no processes, no clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.core.turn_machine import (
    ArmGrace,
    CancelUnwritable,
    Close,
    PromptAnswered,
    PromptFailed,
    Quarantine,
    SendCancel,
    Tick,
    TurnCancelRequested,
    TurnMachine,
    TurnOutcome,
    TurnState,
    TurnTimings,
    UpdateArrived,
)

GRACE = TurnTimings(cancel_grace_s=2.0)


def test_an_answer_closes_the_turn_as_done() -> None:
    machine = TurnMachine(GRACE, now=0)
    assert machine.handle(PromptAnswered("end_turn")) == [Close(TurnOutcome("done", "end_turn"))]
    assert machine.state is TurnState.CLOSED


def test_a_cancel_sends_cancel_answers_permissions_and_arms_the_grace_window() -> None:
    machine = TurnMachine(GRACE, now=10)
    actions = machine.handle(TurnCancelRequested("stop", now=11))
    assert actions == [SendCancel(), ArmGrace(13.0)]
    assert machine.next_deadline() == 13.0


@pytest.mark.parametrize("stop_reason", ["cancelled", "end_turn", "max_tokens"])
def test_any_answer_after_a_cancel_closes_the_turn_as_cancelled_keeping_the_answer(
    stop_reason: str,
) -> None:
    machine = TurnMachine(GRACE, now=0)
    machine.handle(TurnCancelRequested("interrupt", now=0))
    [close] = machine.handle(PromptAnswered(stop_reason))
    assert close == Close(TurnOutcome("cancelled", stop_reason, cancel_reason="interrupt"))


def test_an_error_during_the_drain_closes_quietly_as_cancelled() -> None:
    machine = TurnMachine(GRACE, now=0)
    machine.handle(TurnCancelRequested("stop", now=0))
    [close] = machine.handle(PromptFailed("-32603 boom", recoverable=True))
    assert isinstance(close, Close)
    assert close.outcome.status == "cancelled"
    assert close.outcome.error == "-32603 boom"


def test_the_grace_window_expiring_quarantines_and_closes_as_cancelled() -> None:
    machine = TurnMachine(GRACE, now=0)
    machine.handle(TurnCancelRequested("stop", now=1))
    assert machine.handle(Tick(2.99)) == []
    actions = machine.handle(Tick(3.0))
    assert isinstance(actions[0], Quarantine)
    assert isinstance(actions[1], Close)
    assert actions[1].outcome.status == "cancelled"
    assert actions[1].outcome.quarantined


def test_a_cancel_that_cannot_be_written_quarantines_at_once() -> None:
    machine = TurnMachine(GRACE, now=0)
    machine.handle(TurnCancelRequested("stop", now=0))
    actions = machine.handle(CancelUnwritable())
    assert isinstance(actions[0], Quarantine) and "could not be written" in actions[0].reason
    assert machine.outcome is not None and machine.outcome.quarantined


def test_a_second_cancel_is_harmless() -> None:
    machine = TurnMachine(GRACE, now=0)
    machine.handle(TurnCancelRequested("stop", now=0))
    assert machine.handle(TurnCancelRequested("stop again", now=1)) == []
    assert machine.next_deadline() == 2.0  # the first window stands
    assert machine.cancel_reason == "stop"


def test_nothing_reopens_a_closed_turn() -> None:
    machine = TurnMachine(GRACE, now=0)
    machine.handle(PromptAnswered("end_turn"))
    for event in (
        PromptAnswered("cancelled"),
        PromptFailed("x", True),
        TurnCancelRequested("late", 5),
        Tick(100),
        CancelUnwritable(),
    ):
        assert machine.handle(event) == []
    assert machine.outcome == TurnOutcome("done", "end_turn")


def test_a_crash_mid_turn_fails_it() -> None:
    machine = TurnMachine(GRACE, now=0)
    [close] = machine.handle(PromptFailed("agent exited", recoverable=True))
    assert close == Close(TurnOutcome("failed", error="agent exited", recoverable=True))


def test_the_idle_deadline_is_reset_by_every_update() -> None:
    machine = TurnMachine(TurnTimings(cancel_grace_s=1, idle_timeout_s=5), now=0)
    for t in range(1, 20):
        machine.handle(UpdateArrived(float(t)))
        assert machine.handle(Tick(float(t))) == []
    assert machine.next_deadline() == 24.0
    actions = machine.handle(Tick(24.0))
    assert actions[0] == SendCancel()
    assert machine.cancel_reason == "the agent sent nothing for 5 s"


def test_the_turn_deadline_cuts_even_a_progressing_turn() -> None:
    machine = TurnMachine(TurnTimings(cancel_grace_s=1, turn_timeout_s=10), now=0)
    machine.handle(UpdateArrived(9.0))
    assert machine.handle(Tick(10.0))[0] == SendCancel()
    assert machine.cancel_reason == "the turn ran longer than 10 s"


def test_negative_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="cancel_grace_s"):
        TurnTimings(cancel_grace_s=-1)


events = st.one_of(
    st.builds(PromptAnswered, st.sampled_from(["end_turn", "cancelled", "refusal"])),
    st.builds(PromptFailed, st.text(max_size=5), st.booleans()),
    st.builds(TurnCancelRequested, st.sampled_from(["stop", "interrupt"]), st.floats(0, 100)),
    st.just(CancelUnwritable()),
    st.builds(UpdateArrived, st.floats(0, 100)),
    st.builds(Tick, st.floats(0, 200)),
)


@given(st.lists(events, max_size=30))
def test_a_turn_closes_at_most_once_and_a_requested_cancel_always_reads_cancelled(
    sequence: list[object],
) -> None:
    machine = TurnMachine(TurnTimings(cancel_grace_s=3, idle_timeout_s=50), now=0)
    closes = []
    cancel_requested = False
    for event in sequence:
        if machine.state is TurnState.PROMPTING and isinstance(event, TurnCancelRequested):
            cancel_requested = True
        for action in machine.handle(event):  # type: ignore[arg-type]
            if isinstance(action, Close):
                closes.append(action.outcome)
            if isinstance(action, SendCancel):
                cancel_requested = True
    assert len(closes) <= 1
    if closes and cancel_requested:
        assert closes[0].status == "cancelled"
    if closes:
        assert machine.outcome == closes[0]
