"""A supervised agent's generations one after another, and what each exit leads to.

:class:`AgentLifetime` runs generation after generation (one loop at a time: a revive's loop
waits for the last one to reap its process) and tells the agent's opener when the first one is
ready. When a generation has exited it asks the restart policy, feeds the decision to the
:class:`~acp_bridge.core.lifecycle.AgentLifecycle` machine, and performs what comes back:
report the exit (an :class:`AgentExited` event, and the error that fails the turns in flight
and the calls cut short), wait out the restart delay and start the next generation, give up
(the :class:`RestartLimitError` calls raise until a revive), or fail the very first start.
The agent owns the machine, its condition, its sessions and the connection (the turn path reads
them directly); this performs the start and exit side and keeps what callers ask afterwards.

The errors of the last 8 generations are kept for :meth:`AgentLifetime.exit_failure`; an older
one is forgotten (a call that still asks about it gets the generic "stopped answering" error).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import Process, TaskGroup, TaskStatus

from acp_bridge.client.events import AgentExited, AgentGaveUp, AgentRestarting
from acp_bridge.client.exit_report import history_lines, startup_failure, turn_failure
from acp_bridge.client.generation import Generation, GenerationHost
from acp_bridge.core.condition import Condition
from acp_bridge.core.lifecycle import (
    AgentLifecycle,
    AgentPhase,
    DelayElapsed,
    FailFirstStart,
    GenerationExited,
    GiveUpNow,
    LifecycleAction,
    LifecycleInput,
    ReportExit,
    StartAfter,
    StartGeneration,
)
from acp_bridge.errors import (
    AgentExitedError,
    AgentStartupError,
    ResourceClosedError,
    RestartLimitError,
)
from acp_bridge.process.policy import ExitRecord, format_exit_history

__all__ = ["AgentLifetime"]


class AgentLifetime:
    """Runs the generations of one agent and performs the machine's start and exit actions.

    ``handle`` feeds the machine and wakes the agent's waiters; ``fail_turns`` fails every turn
    still in flight. ``adopted`` is a process spawned early for generation 1, if any.
    """

    def __init__(
        self,
        host: GenerationHost,
        machine: AgentLifecycle,
        handle: Callable[[LifecycleInput], list[LifecycleAction]],
        changed: Condition,
        fail_turns: Callable[[BaseException], None],
    ) -> None:
        self._host = host
        self._lifecycle = machine
        self._handle = handle
        self._changed = changed
        self._fail_turns = fail_turns
        self.adopted: Process | None = None  # spawned early, for generation 1
        self.current: Generation | None = None
        self._started: TaskStatus[None] | None = None
        self.gave_up: RestartLimitError | None = None
        self.start_failure: AgentStartupError | None = None
        self._exit_errors: dict[int, AgentExitedError] = {}
        self._restart_delays: dict[int, tuple[int, float]] = {}
        self._one_loop = anyio.Lock()  # one generation loop at a time (a revive waits its turn)

    @property
    def pid(self) -> int | None:
        return self.current.pid if self.current is not None else None

    async def run_first(self, task_status: TaskStatus[None]) -> None:
        """The agent's first loop; ``task_status`` is told once a generation is ready.

        Raises:
            SpawnError, AgentStartupError: the very first start failed.
        """
        self._started = task_status
        await self.run(StartGeneration(1, restoring=False))
        if self.start_failure is not None:
            raise self.start_failure

    def ready(self) -> None:
        """A generation is ready: the first one tells the agent's opener."""
        if self._started is not None:
            started, self._started = self._started, None
            started.started()

    def start_revived(self, actions: list[LifecycleAction], task_group: TaskGroup) -> None:
        """Start the generation a revive asks for, in a loop of its own (it waits its turn)."""
        for action in actions:
            if isinstance(action, StartGeneration):
                task_group.start_soon(self.run, action)

    async def run(self, first: StartGeneration) -> None:
        """Generations one after another, as the machine decides, until it stops starting them."""
        async with self._one_loop:  # a revive waits for the last loop to reap its process
            start: StartGeneration | None = first
            while start is not None:
                adopted, self.adopted = self.adopted, None
                generation = Generation(self._host, start.number, start.restoring, adopted)
                self.current = generation
                await generation.run()
                start = await self._after_exit(start.number)

    async def _after_exit(self, number: int) -> StartGeneration | None:
        report = self._lifecycle.exits.get(number)
        if report is None or not report.will_restart:
            return None
        delay = self._restart_delays.pop(number, None)
        if delay is None:
            return None
        attempt, delay_s = delay
        self._host.emit(AgentRestarting(self._host.name, attempt, delay_s))
        await anyio.sleep(delay_s)
        for action in self._handle(DelayElapsed(number)):
            if isinstance(action, StartGeneration):
                return action
        return None

    async def exit_failure(self, generation: int) -> BaseException:
        """The error describing how process ``generation`` ended, once that is known (bounded:
        the exit report of a process that is being killed comes within the kill's bound)."""
        name, options = self._host.name, self._host.options
        bound = options.exit_report_timeout_s + options.shutdown.kill_wait_s + 1.0
        with anyio.move_on_after(bound):
            while (
                generation not in self._exit_errors
                and self._lifecycle.state is not AgentPhase.CLOSED
            ):
                await self._changed.wait()
        failure = self._exit_errors.get(generation)
        if failure is not None:
            return failure
        if self._lifecycle.state is AgentPhase.CLOSED:
            return ResourceClosedError(f"{name} was closed")
        return AgentExitedError(f"{name} stopped answering", recoverable=True)

    async def exited(self, number: int, record: ExitRecord, pid: int) -> None:
        """Decide, report, and fail the turns in flight, while the tree is still being reaped."""
        name = self._host.name
        decision = self._host.options.restart.decide(
            [*self._lifecycle.history, record], anyio.current_time(), name=name
        )
        for action in self._handle(GenerationExited(number, record, decision)):
            if isinstance(action, ReportExit):
                await self._report_exit(action, pid)
            elif isinstance(action, StartAfter):
                self._restart_delays[number] = (action.attempt, action.delay_s)
            elif isinstance(action, GiveUpNow):
                reason, history = action.decision.reason, action.decision.history
                self.gave_up = RestartLimitError(
                    f"{reason}\n{format_exit_history(history)}", history=list(history)
                )
                self._host.emit(AgentGaveUp(name, reason, history_lines(history)))
            elif isinstance(action, FailFirstStart):
                self.start_failure = AgentStartupError(startup_failure(name, action.record))

    async def _report_exit(self, report: ReportExit, pid: int) -> None:
        record = report.record
        name = self._host.name
        self._host.emit(
            AgentExited(
                name,
                pid,
                record.returncode,
                record.signal,
                record.reason,
                record.stderr_tail,
                report.will_restart,
            )
        )
        failure = turn_failure(name, record, report.will_restart, pid)
        self._exit_errors[report.number] = failure
        self._exit_errors.pop(report.number - 8, None)
        self._changed.notify_all()
        # Also while closing: a turn still waiting on this process must end now (a turn that
        # already ended ignores it).
        self._fail_turns(failure)
