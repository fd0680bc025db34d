"""The one supervisor: an agent's generations one after another, under the lifecycle machine.

Every front-end (the library's :class:`~acp_bridge.client.supervisor.SupervisedAgent`, the
editor proxy, the host) supervises its agent through a :class:`Supervisor`. It owns:

* the :class:`~acp_bridge.core.lifecycle.AgentLifecycle` machine and the one
  :class:`~acp_bridge.core.condition.Condition` its waiters wake through;
* the generation loop: start generation ``n``, let it run, decide after its exit with the
  :class:`~acp_bridge.process.policy.RestartPolicy`, wait out the delay, start ``n + 1``; one
  loop at a time (a revive waits for the last loop to reap its process);
* the exit records of the last few generations, with one meaning of returncode and signal
  (:meth:`ExitRecord.of_process <acp_bridge.process.policy.ExitRecord.of_process>`).

What it does not own is how one process is run. A front-end plugs in its *kind* of generation
(:class:`GenerationKind`): the library runs a typed client connection, the proxy a raw relay.
The generation tells the supervisor when it is ready (:meth:`Supervisor.ready`), when it is
going away (:meth:`Supervisor.ending`), and how it ended (:meth:`Supervisor.exited`), which it
may do while its process tree is still being reaped so that turns in flight fail at once. The
supervisor then performs the machine's actions through the kind's hooks: report the exit,
restart after a delay, give up, or fail the very first start.

A spawn that fails outright is a generation too: for the first generation the
:class:`~acp_bridge.errors.SpawnError` is raised to whoever runs the supervisor (a wrong
command should fail fast: there is no session to keep yet); for a later one it becomes an exit
record, "could not be restarted: ...", and the restart policy decides as for any exit.
"""

from __future__ import annotations

from typing import Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from acp_bridge.core.condition import Condition
from acp_bridge.core.lifecycle import (
    AgentLifecycle,
    AgentPhase,
    DelayElapsed,
    FailFirstStart,
    GenerationEnding,
    GenerationExited,
    GenerationReady,
    LifecycleAction,
    LifecycleInput,
    ReportExit,
    ReviveRequested,
    ShutdownRequested,
    StartAfter,
    StartGeneration,
)
from acp_bridge.errors import SpawnError
from acp_bridge.process.policy import ExitRecord, GiveUp, RestartPolicy

__all__ = ["GenerationKind", "Supervisor"]


class GenerationKind(Protocol):
    """What a front-end plugs into the :class:`Supervisor`: how one process is run, and what
    the front-end does at each step of the agent's life."""

    async def run_generation(self, number: int, restoring: bool) -> None:
        """Run one agent process from spawn to its exit report.

        It calls :meth:`Supervisor.ready` once the process is initialized (and, when
        ``restoring``, its sessions restored), :meth:`Supervisor.ending` when the process is
        going away, and :meth:`Supervisor.exited` with how it ended, before returning.

        Raises:
            SpawnError: the command could not be started at all.
        """

    async def exit_reported(self, report: ReportExit) -> None:
        """Generation ``report.number`` ended: tell the front-end's users (``report.closing``:
        the supervisor was shutting down anyway)."""

    def restarting(self, attempt: int, delay_s: float) -> None:
        """The next generation starts after ``delay_s`` (restart ``attempt`` of the budget)."""

    async def gave_up(self, decision: GiveUp) -> None:
        """The restart policy gave up: nothing is started again until a revive."""

    async def first_start_failed(self, record: ExitRecord) -> None:
        """The very first process never became ready: nothing is restarted."""


class Supervisor:
    """One agent's lifecycle, performed. Run :meth:`run` in a task; see the module docstring."""

    def __init__(self, name: str, policy: RestartPolicy, kind: GenerationKind) -> None:
        self.name = name
        self.policy = policy
        self.kind = kind
        self.lifecycle = AgentLifecycle()
        self.changed = Condition()
        """Notified after every transition: waiters check the state again."""
        self.last_exit: ExitRecord | None = None
        self._started: TaskStatus[None] | None = None
        self._delays: dict[int, StartAfter] = {}
        self._one_loop = anyio.Lock()  # one generation loop at a time (a revive waits its turn)

    def __repr__(self) -> str:
        state = f"{self.lifecycle.state.value}, generation {self.lifecycle.generation}"
        return f"<Supervisor {self.name!r} [{state}]>"

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> AgentPhase:
        return self.lifecycle.state

    @property
    def generation(self) -> int:
        """The current generation's number (1 before any restart)."""
        return self.lifecycle.generation

    def exit_of(self, number: int) -> ExitRecord | None:
        """How generation ``number`` ended, if it is one of the last few."""
        report = self.lifecycle.exits.get(number)
        return report.record if report is not None else None

    # -- running -------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Generations from the first until the machine starts no more; ``task_status`` is told
        when the first generation is ready.

        Raises:
            SpawnError: the very first spawn failed.
        """
        self._started = task_status
        await self._loop(StartGeneration(1, restoring=False))

    def revive(self, task_group: TaskGroup) -> None:
        """After a give-up: start a fresh generation (a new restart budget), in a loop of its
        own that waits for the last loop to finish. A no-op unless the agent gave up."""
        for action in self.handle(ReviveRequested()):
            if isinstance(action, StartGeneration):
                task_group.start_soon(self._loop, action)

    def shutdown(self) -> None:
        """Start nothing again; a generation that ends from now on is reported as closing."""
        self.handle(ShutdownRequested())

    def handle(self, event: LifecycleInput) -> list[LifecycleAction]:
        """Feed the machine and wake every waiter to check again."""
        actions = self.lifecycle.handle(event)
        self.changed.notify_all()
        return actions

    async def _loop(self, first: StartGeneration) -> None:
        async with self._one_loop:
            start: StartGeneration | None = first
            while start is not None:
                number = start.number
                try:
                    await self.kind.run_generation(number, start.restoring)
                except SpawnError as exc:
                    if number == 1:
                        raise
                    self.ending(number)
                    now = anyio.current_time()
                    record = ExitRecord(now, 0.0, None, None, f"could not be restarted: {exc}")
                    await self.exited(number, record)
                start = await self._next(number)

    async def _next(self, number: int) -> StartGeneration | None:
        delay = self._delays.pop(number, None)
        if delay is None:
            return None
        self.kind.restarting(delay.attempt, delay.delay_s)
        await anyio.sleep(delay.delay_s)
        for action in self.handle(DelayElapsed(number)):
            if isinstance(action, StartGeneration):
                return action
        return None

    # -- what a running generation tells ---------------------------------------------------------

    def ready(self, number: int) -> None:
        """Generation ``number`` is initialized and restored: the agent is ready."""
        self.handle(GenerationReady(number))
        if self._started is not None and self.lifecycle.state is AgentPhase.READY:
            started, self._started = self._started, None
            started.started()

    def ending(self, number: int) -> None:
        """Generation ``number``'s process is going away: callers wait for the next one."""
        self.handle(GenerationEnding(number))

    async def exited(self, number: int, record: ExitRecord) -> None:
        """How generation ``number`` ended: decide with the policy, and perform the answer's
        reports now (the restart itself waits until the generation's run returns)."""
        self.last_exit = record
        decision = self.policy.decide(
            [*self.lifecycle.history, record], anyio.current_time(), name=self.name
        )
        for action in self.handle(GenerationExited(number, record, decision)):
            if isinstance(action, ReportExit):
                await self.kind.exit_reported(action)
            elif isinstance(action, StartAfter):
                self._delays[number] = action
            elif isinstance(action, GiveUp):
                await self.kind.gave_up(action)
            elif isinstance(action, FailFirstStart):
                await self.kind.first_start_failed(action.record)
