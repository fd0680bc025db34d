"""The agent lifecycle machine, purely: its table, and a hypothesis state machine."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from acp_bridge.core.lifecycle import (
    TRANSITIONS,
    AgentLifecycle,
    AgentPhase,
    DelayElapsed,
    FailFirstStart,
    GenerationEnding,
    GenerationExited,
    GenerationReady,
    ReportExit,
    ReviveRequested,
    ShutdownRequested,
    StartAfter,
    StartGeneration,
)
from acp_bridge.errors import LocalProtocolError
from acp_bridge.process.policy import ExitRecord, GiveUp, Restart

RECORD = ExitRecord(at_s=1.0, uptime_s=0.5, returncode=1, signal=None, reason="exited with code 1")
RESTART = Restart(delay_s=0.25, attempt=1)
GIVE_UP = GiveUp("gave up", (RECORD,))


def ready_machine() -> AgentLifecycle:
    machine = AgentLifecycle()
    assert machine.handle(GenerationReady(1)) == []
    assert machine.state is AgentPhase.READY
    return machine


def test_a_crash_of_a_ready_agent_restarts_after_the_policy_delay() -> None:
    machine = ready_machine()
    assert machine.handle(GenerationEnding(1)) == []
    assert machine.state is AgentPhase.RESTARTING
    actions = machine.handle(GenerationExited(1, RECORD, RESTART))
    assert actions == [ReportExit(1, RECORD, True, False), StartAfter(1, 1, 0.25)]
    assert machine.handle(DelayElapsed(1)) == [StartGeneration(2, restoring=True)]
    assert (machine.state, machine.generation) == (AgentPhase.STARTING, 2)


def test_a_restart_that_dies_before_initialize_keeps_waiters_waiting_for_the_next() -> None:
    machine = ready_machine()
    machine.handle(GenerationEnding(1))
    machine.handle(GenerationExited(1, RECORD, RESTART))
    machine.handle(DelayElapsed(1))
    # Generation 2 never becomes ready: still not READY, and the next one is started.
    machine.handle(GenerationEnding(2))
    actions = machine.handle(GenerationExited(2, RECORD, Restart(0.5, 2)))
    assert actions[-1] == StartAfter(2, 2, 0.5)
    assert machine.handle(DelayElapsed(2)) == [StartGeneration(3, restoring=True)]
    machine.handle(GenerationReady(3))
    assert machine.state is AgentPhase.READY


def test_the_first_start_failing_is_reported_to_the_opener_not_restarted() -> None:
    machine = AgentLifecycle()
    actions = machine.handle(GenerationExited(1, RECORD, RESTART))
    assert actions == [ReportExit(1, RECORD, False, False), FailFirstStart(RECORD)]
    assert machine.state is AgentPhase.CLOSED


def test_giving_up_then_reviving_starts_a_fresh_budget() -> None:
    machine = ready_machine()
    machine.handle(GenerationEnding(1))
    assert machine.handle(GenerationExited(1, RECORD, GIVE_UP))[-1] == GIVE_UP
    assert machine.state is AgentPhase.GAVE_UP and machine.history == [RECORD]
    assert machine.handle(ReviveRequested()) == [StartGeneration(2, restoring=True)]
    assert machine.history == [] and machine.gave_up is None
    # After a revive, a start that never gets ready goes through the policy, not FailFirstStart.
    actions = machine.handle(GenerationExited(2, RECORD, RESTART))
    assert actions[-1] == StartAfter(2, 1, 0.25)


def test_close_wins_over_everything_after_it() -> None:
    machine = ready_machine()
    machine.handle(ShutdownRequested())
    assert machine.handle(GenerationEnding(1)) == []
    assert machine.handle(GenerationExited(1, RECORD, RESTART)) == [
        ReportExit(1, RECORD, False, True)
    ]
    assert machine.handle(ReviveRequested()) == []
    assert machine.state is AgentPhase.CLOSED


@pytest.mark.parametrize(
    "event",
    [GenerationReady(2), GenerationEnding(7), GenerationExited(3, RECORD, RESTART)],
)
def test_an_event_for_another_generation_is_a_bug(event: object) -> None:
    machine = ready_machine()
    with pytest.raises(LocalProtocolError, match="generation"):
        machine.handle(event)  # type: ignore[arg-type]


def test_an_event_with_no_transition_raises() -> None:
    machine = ready_machine()
    with pytest.raises(LocalProtocolError, match="no transition"):
        machine.handle(DelayElapsed(1))  # no exit yet
    machine.handle(GenerationEnding(1))
    machine.handle(GenerationExited(1, RECORD, RESTART))
    with pytest.raises(LocalProtocolError, match="no transition"):
        machine.handle(GenerationExited(1, RECORD, RESTART))  # one exit per generation


def test_exit_reports_and_history_are_bounded() -> None:
    machine = ready_machine()
    for number in range(1, 400):
        machine.handle(GenerationEnding(number))
        machine.handle(GenerationExited(number, RECORD, RESTART))
        machine.handle(DelayElapsed(number))
        machine.handle(GenerationReady(number + 1))
    assert len(machine.exits) <= 8
    assert len(machine.history) <= 256


class LifecycleMachine(RuleBasedStateMachine):
    """Random sequences of what a performer can feed; the invariants always hold."""

    def __init__(self) -> None:
        super().__init__()
        self.machine = AgentLifecycle()
        self.ever_ready = False
        self.exited: set[int] = set()
        self.closed = False

    def _feed(self, event: object) -> list[object]:
        return list(self.machine.handle(event))  # type: ignore[arg-type]

    @precondition(lambda self: self.machine.state is AgentPhase.STARTING)
    @rule()
    def ready(self) -> None:
        self._feed(GenerationReady(self.machine.generation))
        self.ever_ready = True
        assert self.machine.state is AgentPhase.READY

    @precondition(
        lambda self: (
            self.machine.state in (AgentPhase.STARTING, AgentPhase.READY)
            and self.machine.generation not in self.exited
        )
    )
    @rule(give_up=st.booleans())
    def crash(self, give_up: bool) -> None:
        number = self.machine.generation
        self._feed(GenerationEnding(number))
        assert self.machine.state is AgentPhase.RESTARTING
        actions = self._feed(GenerationExited(number, RECORD, GIVE_UP if give_up else RESTART))
        self.exited.add(number)
        reports = [a for a in actions if isinstance(a, ReportExit)]
        assert len(reports) == 1
        assert self.machine.exits[number] == reports[0]

    @precondition(
        lambda self: (
            self.machine.state is AgentPhase.RESTARTING and self.machine.generation in self.exited
        )
    )
    @rule()
    def delay_over(self) -> None:
        before = self.machine.generation
        actions = self._feed(DelayElapsed(before))
        assert actions == [StartGeneration(before + 1, restoring=True)]

    @rule()
    def revive(self) -> None:
        was = self.machine.state
        actions = self._feed(ReviveRequested())
        assert bool(actions) == (was is AgentPhase.GAVE_UP)

    @rule()
    def close(self) -> None:
        self._feed(ShutdownRequested())
        self.closed = True

    @invariant()
    def closed_stays_closed(self) -> None:
        if self.closed:
            assert self.machine.state is AgentPhase.CLOSED

    @invariant()
    def given_up_has_a_reason(self) -> None:
        if self.machine.state is AgentPhase.GAVE_UP:
            assert self.machine.gave_up is not None


TestLifecycleMachine = LifecycleMachine.TestCase


def test_the_table_names_a_step_or_a_refusal_for_every_state_and_event() -> None:
    """Every (state, event type) pair is either in the table or refused, never half-handled."""
    events = [
        GenerationReady(1),
        GenerationEnding(1),
        GenerationExited(1, RECORD, RESTART),
        DelayElapsed(1),
        ShutdownRequested(),
        ReviveRequested(),
    ]
    for state in AgentPhase:
        for event in events:
            machine = AgentLifecycle()
            machine.state = state
            if (state, type(event)) in TRANSITIONS:
                continue
            with pytest.raises(LocalProtocolError, match="no transition"):
                machine.handle(event)
    # The shutdown and the revive are taken in every state.
    assert all((state, ShutdownRequested) in TRANSITIONS for state in AgentPhase)
    assert all((state, ReviveRequested) in TRANSITIONS for state in AgentPhase)
