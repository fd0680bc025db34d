"""The agent lifecycle machine: one supervised agent from its first spawn to its close. Pure.

:class:`AgentLifecycle` decides; :class:`~acp_bridge.client.supervisor.SupervisedAgent`
(through its :class:`~acp_bridge.client.lifetime.AgentLifetime`) performs the actions it
returns (start a generation, report an exit, wait out a restart delay, give up, fail the first
start) and feeds back what happened. No I/O and no clock: the restart policy's decision and the
exit record come in as inputs.

Theory of operation
-------------------
A *generation* is one agent process, numbered from 1. The agent is STARTING while a generation
spawns, initializes and restores the sessions; READY once it did all three; RESTARTING from the
moment its process is going away until the next generation starts (the exit is being reported,
or the policy's delay is running); GAVE_UP when the restart policy gave up; CLOSED for good.

Callers wait for READY through one condition that is notified after every transition: they
check the state, and if it is not the one they need, they wait and check again. Nothing is
kept in a swapped event, so a caller that started waiting during generation 2 is woken when
generation 2 dies before ``initialize`` and again when generation 3 becomes ready.

Transitions (state, event) -> (state, actions); :data:`TRANSITIONS` holds them as data::

    STARTING    GenerationReady(n)      -> READY
    STARTING    GenerationEnding(n)     -> RESTARTING
    READY       GenerationEnding(n)     -> RESTARTING
    RESTARTING  GenerationExited(n)     -> RESTARTING  ReportExit, StartAfter(delay)
                                        -> GAVE_UP     ReportExit, GiveUp
                                        -> CLOSED      ReportExit, FailFirstStart
                                                       (the very first start never got ready)
    RESTARTING  DelayElapsed(n)         -> STARTING    StartGeneration(n + 1, restoring)
    GAVE_UP     ReviveRequested         -> STARTING    StartGeneration(n + 1, restoring)
    (any)       ShutdownRequested          -> CLOSED
    CLOSED      GenerationEnding/Exited -> CLOSED      ReportExit (will_restart False)
    CLOSED      DelayElapsed, Revive... -> CLOSED      (nothing)

``GenerationExited`` may come without ``GenerationEnding`` (a spawn that failed outright): it
then implies it. An event that names another generation than the current one, or that has no
transition from the current state, raises :class:`LocalProtocolError`: it is a bug in the
performer, never something to ignore.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping

from acp_bridge.errors import LocalProtocolError
from acp_bridge.process.policy import Decision, ExitRecord, GiveUp, Restart
from acp_bridge.record import record

__all__ = [
    "TRANSITIONS",
    "AgentLifecycle",
    "AgentPhase",
    "DelayElapsed",
    "FailFirstStart",
    "GenerationEnding",
    "GenerationExited",
    "GenerationReady",
    "LifecycleAction",
    "LifecycleInput",
    "ReportExit",
    "ReviveRequested",
    "ShutdownRequested",
    "StartAfter",
    "StartGeneration",
]

_EXITS_KEPT = 8
"""Exit reports kept for callers that ask how a generation ended (older ones are forgotten)."""
_HISTORY_KEPT = 256
"""Exits kept for the restart policy: far more than any cap counts (the policy gives up long
before), so an agent that crashes once a day for years does not grow the bridge."""


class AgentPhase(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    GAVE_UP = "gave up"
    CLOSED = "closed"


# -- inputs (past tense) ----------------------------------------------------------------------


@record
class GenerationReady:
    """Generation ``number`` initialized and restored every session."""

    number: int


@record
class GenerationEnding:
    """Generation ``number``'s process is going away (exited, stdout ended, quarantined...)."""

    number: int


@record
class GenerationExited:
    """How generation ``number`` ended, and what the restart policy decided about it."""

    number: int
    record: ExitRecord
    decision: Decision


@record
class DelayElapsed:
    """The restart delay after generation ``number`` is over."""

    number: int


@record
class ShutdownRequested:
    pass


@record
class ReviveRequested:
    pass


LifecycleInput = (
    GenerationReady
    | GenerationEnding
    | GenerationExited
    | DelayElapsed
    | ShutdownRequested
    | ReviveRequested
)

# -- actions (imperative) ---------------------------------------------------------------------


@record
class StartGeneration:
    number: int
    restoring: bool
    """A restart (or revive): the known sessions are restored before the agent is ready."""


@record
class ReportExit:
    """Tell the caller how generation ``number`` ended; fail its turns in flight unless closing."""

    number: int
    record: ExitRecord
    will_restart: bool
    closing: bool


@record
class StartAfter:
    """Wait ``delay_s``, then feed :class:`DelayElapsed` (restart ``attempt`` of the budget)."""

    number: int
    attempt: int
    delay_s: float


@record
class FailFirstStart:
    """The very first process never became ready: the opener hears it, nothing restarts."""

    record: ExitRecord


LifecycleAction = StartGeneration | ReportExit | StartAfter | GiveUp | FailFirstStart
"""The restart policy's :class:`GiveUp` is itself the action when it gives up: calls fail with
its reason until a revive."""


class AgentLifecycle:
    """One supervised agent's state. Feed inputs to :meth:`handle`; perform what it returns."""

    def __init__(self) -> None:
        self.state = AgentPhase.STARTING
        self.generation = 1
        self.history: list[ExitRecord] = []
        """Exits since the last revive, for the restart policy (it trims by its own window)."""
        self.gave_up: GiveUp | None = None
        self._ever_ready = False
        self._revived = False
        self._exits: dict[int, ReportExit] = {}

    def __repr__(self) -> str:
        return f"<AgentLifecycle [{self.state.value}, generation {self.generation}]>"

    @property
    def exits(self) -> Mapping[int, ReportExit]:
        """How recent generations ended, by number (the last few only)."""
        return self._exits

    def handle(self, event: LifecycleInput) -> list[LifecycleAction]:
        """Take ``event`` by :data:`TRANSITIONS`; the actions to perform, in order.

        Raises:
            LocalProtocolError: no transition from the current state on this event, or the
                event names another generation than the current one (a performer's bug).
        """
        number = getattr(event, "number", None)
        if number is not None:
            self._check_current(number)
        step = TRANSITIONS.get((self.state, type(event)))
        if step is None:
            raise self._no_transition(event)
        return step(self, event)

    # -- the steps of the table (each takes the event it is listed for) ----------------------

    def _nothing(self, event: LifecycleInput) -> list[LifecycleAction]:
        return []

    def _close(self, event: LifecycleInput) -> list[LifecycleAction]:
        self.state = AgentPhase.CLOSED
        return []

    def _ready(self, event: LifecycleInput) -> list[LifecycleAction]:
        self.state = AgentPhase.READY
        self._ever_ready = True
        return []

    def _going_away(self, event: LifecycleInput) -> list[LifecycleAction]:
        self.state = AgentPhase.RESTARTING
        return []

    def _revive(self, event: LifecycleInput) -> list[LifecycleAction]:
        return self._start_next()

    def _delay_elapsed(self, event: LifecycleInput) -> list[LifecycleAction]:
        assert isinstance(event, DelayElapsed)
        if event.number not in self._exits:  # no exit, no delay: nothing to wait out
            raise self._no_transition(event)
        return self._start_next()

    def _closed_exit(self, event: LifecycleInput) -> list[LifecycleAction]:
        assert isinstance(event, GenerationExited)
        return [self._remember(event.record, will_restart=False, closing=True)]

    def _exited(self, event: LifecycleInput) -> list[LifecycleAction]:
        assert isinstance(event, GenerationExited)
        if event.number in self._exits:
            raise self._no_transition(event)  # one exit per generation
        self.state = AgentPhase.RESTARTING
        self.history.append(event.record)
        del self.history[:-_HISTORY_KEPT]
        decision = event.decision
        if not self._ever_ready and not self._revived:
            self.state = AgentPhase.CLOSED
            report = self._remember(event.record, will_restart=False, closing=False)
            return [report, FailFirstStart(event.record)]
        if isinstance(decision, Restart):
            report = self._remember(event.record, will_restart=True, closing=False)
            return [report, StartAfter(event.number, decision.attempt, decision.delay_s)]
        self.state = AgentPhase.GAVE_UP
        self.gave_up = decision
        report = self._remember(event.record, will_restart=False, closing=False)
        return [report, decision]

    def _start_next(self) -> list[LifecycleAction]:
        if self.state is AgentPhase.GAVE_UP:
            self.history.clear()
            self.gave_up = None
            self._revived = True
        self.state = AgentPhase.STARTING
        self.generation += 1
        return [StartGeneration(self.generation, restoring=True)]

    def _remember(self, record: ExitRecord, *, will_restart: bool, closing: bool) -> ReportExit:
        report = ReportExit(self.generation, record, will_restart, closing)
        self._exits[self.generation] = report
        self._exits.pop(self.generation - _EXITS_KEPT, None)
        return report

    def _check_current(self, number: int) -> None:
        if number != self.generation:
            raise LocalProtocolError(
                f"lifecycle event for generation {number}, but generation {self.generation} "
                "is the current one"
            )

    def _no_transition(self, event: LifecycleInput) -> LocalProtocolError:
        return LocalProtocolError(
            f"agent lifecycle: no transition from {self.state.value} on {event!r}"
        )


_Step = Callable[[AgentLifecycle, LifecycleInput], list[LifecycleAction]]
_STARTING, _READY, _RESTARTING, _GAVE_UP, _CLOSED = (
    AgentPhase.STARTING,
    AgentPhase.READY,
    AgentPhase.RESTARTING,
    AgentPhase.GAVE_UP,
    AgentPhase.CLOSED,
)
_NOTHING, _EXITED = AgentLifecycle._nothing, AgentLifecycle._exited

TRANSITIONS: Mapping[tuple[AgentPhase, type[LifecycleInput]], _Step] = {
    **{(state, ShutdownRequested): AgentLifecycle._close for state in AgentPhase},
    **{(state, ReviveRequested): _NOTHING for state in AgentPhase if state is not _GAVE_UP},
    (_GAVE_UP, ReviveRequested): AgentLifecycle._revive,
    (_STARTING, GenerationReady): AgentLifecycle._ready,
    (_CLOSED, GenerationReady): _NOTHING,
    (_STARTING, GenerationEnding): AgentLifecycle._going_away,
    (_READY, GenerationEnding): AgentLifecycle._going_away,
    (_RESTARTING, GenerationEnding): _NOTHING,  # already known to be going away
    (_CLOSED, GenerationEnding): _NOTHING,
    (_STARTING, GenerationExited): _EXITED,
    (_READY, GenerationExited): _EXITED,
    (_RESTARTING, GenerationExited): _EXITED,
    (_CLOSED, GenerationExited): AgentLifecycle._closed_exit,
    (_RESTARTING, DelayElapsed): AgentLifecycle._delay_elapsed,
    (_CLOSED, DelayElapsed): _NOTHING,
}
"""The machine as data: (state, event type) -> the step that takes it. A pair that is not
here has no transition: :meth:`AgentLifecycle.handle` raises for it."""
