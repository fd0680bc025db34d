"""The turn state machine, driven by events alone: no processes, no clock."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.core import turn_machine
from acp_bridge.core.turn_machine import (
    EVENT_TYPES,
    TRANSITIONS,
    ArmGrace,
    CancelUnwritable,
    Close,
    EndedBy,
    PromptAnswered,
    PromptFailed,
    PromptSent,
    Quarantine,
    SendCancel,
    Tick,
    TurnCancelRequested,
    TurnMachine,
    TurnOutcome,
    TurnState,
    TurnStatus,
    TurnTimings,
    UpdateArrived,
)

GRACE = TurnTimings(cancel_grace_s=2.0)
DONE, CANCELLED, FAILED = TurnStatus.DONE, TurnStatus.CANCELLED, TurnStatus.FAILED


def prompting(timings: TurnTimings = GRACE, *, now: float = 0.0) -> TurnMachine:
    """A machine whose prompt went out at ``now``."""
    machine = TurnMachine(timings)
    assert machine.handle(PromptSent(now)) == []
    assert machine.state is TurnState.PROMPTING
    return machine


def test_every_state_and_event_pair_has_a_transition() -> None:
    pairs = {(state, event_type) for state in TurnState for event_type in EVENT_TYPES}
    assert set(TRANSITIONS) == pairs


def test_the_docstring_table_is_the_transition_table() -> None:
    """Every (state, event) pair the module docstring's table names is in TRANSITIONS, and the
    other way round (``CLOSED anything`` stands for every event)."""
    doc = turn_machine.__doc__ or ""
    rows = re.findall(r"^    ([A-Z_]+) +([A-Za-z]+) +-> +([A-Z_]+)", doc, re.MULTILINE)
    documented: set[tuple[TurnState, type]] = set()
    names = {event_type.__name__: event_type for event_type in EVENT_TYPES}
    for state_name, event_name, target in rows:
        state = TurnState[state_name]
        TurnState[target]  # a state that exists
        if event_name == "anything":
            documented |= {(state, event_type) for event_type in EVENT_TYPES}
        else:
            assert (state, names[event_name]) not in documented, f"{state_name} {event_name} twice"
            documented.add((state, names[event_name]))
    assert documented == set(TRANSITIONS)


def test_an_answer_closes_the_turn_as_done_by_the_agent() -> None:
    machine = prompting()
    assert machine.handle(PromptAnswered("end_turn")) == [
        Close(TurnOutcome(DONE, EndedBy.AGENT, "end_turn"))
    ]
    assert machine.state is TurnState.CLOSED


def test_a_cancel_sends_cancel_answers_permissions_and_arms_the_grace_window() -> None:
    machine = prompting(now=10)
    actions = machine.handle(TurnCancelRequested(EndedBy.STOP, now=11))
    assert actions == [SendCancel(), ArmGrace(13.0)]
    assert machine.next_deadline() == 13.0


@pytest.mark.parametrize("stop_reason", ["cancelled", "end_turn", "max_tokens"])
def test_any_answer_after_a_cancel_closes_the_turn_as_cancelled_keeping_the_answer(
    stop_reason: str,
) -> None:
    machine = prompting()
    machine.handle(TurnCancelRequested(EndedBy.INTERRUPT, now=0))
    [close] = machine.handle(PromptAnswered(stop_reason))
    assert isinstance(close, Close)
    assert (close.outcome.status, close.outcome.ended_by) == (CANCELLED, EndedBy.INTERRUPT)
    assert close.outcome.stop_reason == stop_reason
    assert close.outcome.reason == "a message interrupted the turn"


def test_an_error_during_the_drain_closes_quietly_as_cancelled() -> None:
    machine = prompting()
    machine.handle(TurnCancelRequested(EndedBy.STOP, now=0))
    [close] = machine.handle(PromptFailed("-32603 boom", recoverable=True))
    assert isinstance(close, Close)
    assert (close.outcome.status, close.outcome.ended_by) == (CANCELLED, EndedBy.STOP)
    assert close.outcome.error == "-32603 boom"


def test_the_grace_window_expiring_quarantines_and_closes_as_cancelled_by_the_asker() -> None:
    machine = prompting()
    machine.handle(TurnCancelRequested(EndedBy.CALLER, now=1))
    assert machine.handle(Tick(2.99)) == []
    actions = machine.handle(Tick(3.0))
    assert isinstance(actions[0], Quarantine)
    assert isinstance(actions[1], Close)
    outcome = actions[1].outcome
    assert (outcome.status, outcome.ended_by, outcome.quarantined) == (
        CANCELLED,
        EndedBy.CALLER,
        True,
    )


def test_a_cancel_that_cannot_be_written_quarantines_at_once() -> None:
    machine = prompting()
    machine.handle(TurnCancelRequested(EndedBy.STOP, now=0))
    actions = machine.handle(CancelUnwritable())
    assert isinstance(actions[0], Quarantine) and "could not be written" in actions[0].reason
    assert machine.outcome is not None and machine.outcome.quarantined


def test_a_second_cancel_is_harmless() -> None:
    machine = prompting()
    machine.handle(TurnCancelRequested(EndedBy.STOP, now=0))
    assert machine.handle(TurnCancelRequested(EndedBy.CLOSE, now=1)) == []
    assert machine.next_deadline() == 2.0  # the first window stands
    assert machine.cancelled_by is EndedBy.STOP


def test_nothing_reopens_a_closed_turn() -> None:
    machine = prompting()
    machine.handle(PromptAnswered("end_turn"))
    for event in (
        PromptAnswered("cancelled"),
        PromptFailed("x", True),
        TurnCancelRequested(EndedBy.CALLER, 5),
        Tick(100),
        CancelUnwritable(),
        PromptSent(200),
    ):
        assert machine.handle(event) == []
    assert machine.outcome == TurnOutcome(DONE, EndedBy.AGENT, "end_turn")


def test_a_crash_mid_turn_fails_it_by_the_crash_and_an_error_answer_by_the_agent() -> None:
    machine = prompting()
    [close] = machine.handle(PromptFailed("agent exited", recoverable=True, crashed=True))
    assert close == Close(TurnOutcome(FAILED, EndedBy.CRASH, error="agent exited"))
    machine = prompting()
    [close] = machine.handle(PromptFailed("-32603", recoverable=True))
    assert isinstance(close, Close) and close.outcome.ended_by is EndedBy.AGENT


def test_the_idle_deadline_is_reset_by_every_update() -> None:
    machine = prompting(TurnTimings(cancel_grace_s=1, idle_timeout_s=5))
    for t in range(1, 20):
        machine.handle(UpdateArrived(float(t)))
        assert machine.handle(Tick(float(t))) == []
    assert machine.next_deadline() == 24.0
    actions = machine.handle(Tick(24.0))
    assert actions[0] == SendCancel()
    assert machine.cancelled_by is EndedBy.IDLE_DEADLINE
    machine.handle(PromptAnswered("cancelled"))
    assert machine.outcome is not None
    assert machine.outcome.reason == "the agent sent nothing for 5 s"


def test_the_turn_deadline_cuts_even_a_progressing_turn() -> None:
    machine = prompting(TurnTimings(cancel_grace_s=1, turn_timeout_s=10))
    machine.handle(UpdateArrived(9.0))
    assert machine.handle(Tick(10.0))[0] == SendCancel()
    assert machine.cancelled_by is EndedBy.TURN_DEADLINE
    assert EndedBy.TURN_DEADLINE.is_deadline and not EndedBy.STOP.is_deadline


def test_the_deadlines_count_from_the_prompt_not_from_the_turns_creation() -> None:
    machine = TurnMachine(TurnTimings(cancel_grace_s=1, turn_timeout_s=10))
    assert machine.next_deadline() is None  # STARTING: no deadline runs
    assert machine.handle(Tick(100.0)) == []
    machine.handle(PromptSent(50.0))
    assert machine.next_deadline() == 60.0


def test_an_early_cancel_goes_out_right_after_the_prompt() -> None:
    machine = TurnMachine(GRACE)
    assert machine.handle(TurnCancelRequested(EndedBy.STOP, now=0)) == []
    assert machine.state is TurnState.CANCEL_AT_START
    assert machine.handle(TurnCancelRequested(EndedBy.CLOSE, now=1)) == []  # the first stands
    assert machine.handle(PromptSent(5.0)) == [SendCancel(), ArmGrace(7.0)]
    [close] = machine.handle(PromptAnswered("cancelled"))
    assert isinstance(close, Close)
    assert (close.outcome.status, close.outcome.ended_by) == (CANCELLED, EndedBy.STOP)


def test_an_answer_read_before_the_prompts_write_returned_closes_the_turn() -> None:
    machine = TurnMachine(GRACE)
    [close] = machine.handle(PromptAnswered("end_turn"))
    assert isinstance(close, Close) and close.outcome.status is DONE
    assert machine.handle(PromptSent(1.0)) == []
    early = TurnMachine(GRACE)
    early.handle(TurnCancelRequested(EndedBy.INTERRUPT, now=0))
    [close] = early.handle(PromptAnswered("end_turn"))
    assert isinstance(close, Close) and close.outcome.status is CANCELLED


def test_negative_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="cancel_grace_s"):
        TurnTimings(cancel_grace_s=-1)


enders = st.sampled_from([EndedBy.STOP, EndedBy.INTERRUPT, EndedBy.CALLER])
events = st.one_of(
    st.builds(PromptSent, st.floats(0, 100)),
    st.builds(PromptAnswered, st.sampled_from(["end_turn", "cancelled", "refusal"])),
    st.builds(PromptFailed, st.text(max_size=5), st.booleans(), st.booleans()),
    st.builds(TurnCancelRequested, enders, st.floats(0, 100)),
    st.just(CancelUnwritable()),
    st.builds(UpdateArrived, st.floats(0, 100)),
    st.builds(Tick, st.floats(0, 200)),
)


@given(st.lists(events, max_size=30))
def test_a_turn_closes_at_most_once_and_a_requested_cancel_always_reads_cancelled(
    sequence: list[object],
) -> None:
    machine = TurnMachine(TurnTimings(cancel_grace_s=3, idle_timeout_s=50))
    closes = []
    asked: EndedBy | None = None
    for event in sequence:
        open_states = (TurnState.STARTING, TurnState.PROMPTING)
        if machine.state in open_states and isinstance(event, TurnCancelRequested):
            asked = event.by
        for action in machine.handle(event):  # type: ignore[arg-type]
            if isinstance(action, Close):
                closes.append(action.outcome)
            if isinstance(action, SendCancel) and asked is None:
                asked = EndedBy.IDLE_DEADLINE
    assert len(closes) <= 1
    if closes and asked is not None:
        assert closes[0].status is CANCELLED
        assert closes[0].ended_by is asked
    if closes:
        assert machine.outcome == closes[0]
        if closes[0].status is not CANCELLED:
            assert closes[0].ended_by in (EndedBy.AGENT, EndedBy.CRASH)
