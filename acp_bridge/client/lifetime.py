"""The library's kind of generation, plugged into the one core supervisor.

See :class:`~acp_bridge.core.supervisor.Supervisor`.

:class:`AgentLifetime` is what the supervisor calls at each step of a supervised agent's life:
it runs one generation (a typed client connection, :class:`~.generation.Generation`), and it
performs the lifecycle machine's reports in the library's words: an :class:`AgentExited` event
and the error that fails the turns in flight and the calls cut short, an
:class:`AgentRestarting` event before a restart, the :class:`RestartLimitError` calls raise after
a give-up (until a revive), and the :class:`AgentStartupError` of a first start that failed.
The supervisor owns the machine, its condition and the generation loop; the agent owns its
sessions and the connection (the turn path reads them directly).

The errors of the last 8 generations are kept for :meth:`AgentLifetime.exit_failure`; an older
one is forgotten (a call that still asks about it gets the generic "stopped answering" error).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import Process, TaskStatus

from acp_bridge.client.events import AgentExited, AgentGaveUp, AgentRestarting
from acp_bridge.client.exit_report import history_lines, startup_failure, turn_failure
from acp_bridge.client.generation import Generation, GenerationHost
from acp_bridge.core.lifecycle import AgentPhase, ReportExit
from acp_bridge.core.supervisor import Supervisor
from acp_bridge.errors import (
    AgentExitedError,
    AgentStartupError,
    ResourceClosedError,
    RestartLimitError,
)
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import ExitRecord, GiveUp, format_exit_history

__all__ = ["AgentLifetime"]

_EXIT_ERRORS_KEPT = 8


class AgentLifetime:
    """The library's generations, under ``supervisor`` (see the module docstring).

    ``fail_turns`` fails every turn still in flight. ``adopted`` is a process spawned early for
    generation 1, if any.
    """

    def __init__(
        self, host: GenerationHost, fail_turns: Callable[[BaseException], None]
    ) -> None:
        self._host = host
        self._fail_turns = fail_turns
        self.supervisor = Supervisor(host.name, host.options.restart, self)
        self.adopted: Process | None = None  # spawned early, for generation 1
        self.current: Generation | None = None
        self.limit_error: RestartLimitError | None = None
        """What calls raise after a give-up (until a revive)."""
        self.start_failure: AgentStartupError | None = None
        self._exit_errors: dict[int, AgentExitedError] = {}
        self._shutdown: ShutdownTimeouts | None = None  # the options' bounds, unless changed

    @property
    def pid(self) -> int | None:
        return self.current.pid if self.current is not None else None

    async def run_first(self, task_status: TaskStatus[None]) -> None:
        """The agent's first loop; ``task_status`` is told once a generation is ready.

        Raises:
            SpawnError, AgentStartupError: the very first start failed.
        """
        await self.supervisor.run(task_status=task_status)
        if self.start_failure is not None:
            raise self.start_failure

    async def exit_failure(self, generation: int) -> BaseException:
        """The error describing how process ``generation`` ended, once that is known (bounded:
        the exit report of a process that is being killed comes within the kill's bound)."""
        name, options = self._host.name, self._host.options
        lifecycle, changed = self.supervisor.lifecycle, self.supervisor.changed
        bound = options.exit_report_timeout_s + options.shutdown.kill_wait_s + 1.0
        with anyio.move_on_after(bound):
            while generation not in self._exit_errors and lifecycle.state is not AgentPhase.CLOSED:
                await changed.wait()
        failure = self._exit_errors.get(generation)
        if failure is not None:
            return failure
        if lifecycle.state is AgentPhase.CLOSED:
            return ResourceClosedError(f"{name} was closed")
        return AgentExitedError(f"{name} stopped answering", recoverable=True)

    def use_shutdown(self, bounds: ShutdownTimeouts) -> None:
        """Stop the current process (and any later one) within ``bounds``."""
        self._shutdown = bounds
        if self.current is not None:
            self.current.use_shutdown(bounds)

    # -- the supervisor's hooks (GenerationKind) -----------------------------------------------

    async def run_generation(self, number: int, restoring: bool) -> None:
        adopted, self.adopted = self.adopted, None
        generation = Generation(self._host, number, restoring, adopted)
        if self._shutdown is not None:
            generation.use_shutdown(self._shutdown)
        self.current = generation
        await generation.run()

    async def exit_reported(self, report: ReportExit) -> None:
        record = report.record
        name = self._host.name
        pid = self.pid or 0
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
        failure = turn_failure(name, record, report.will_restart, pid, closing=report.closing)
        self._exit_errors[report.number] = failure
        self._exit_errors.pop(report.number - _EXIT_ERRORS_KEPT, None)
        self.supervisor.changed.notify_all()
        # Also while closing: a turn still waiting on this process must end now (a turn that
        # already ended ignores it).
        self._fail_turns(failure)

    def restarting(self, attempt: int, delay_s: float) -> None:
        self._host.emit(AgentRestarting(self._host.name, attempt, delay_s))

    async def gave_up(self, decision: GiveUp) -> None:
        reason, history = decision.reason, decision.history
        self.limit_error = RestartLimitError(
            f"{reason}\n{format_exit_history(history)}", history=list(history)
        )
        self._host.emit(AgentGaveUp(self._host.name, reason, history_lines(history)))

    async def first_start_failed(self, record: ExitRecord) -> None:
        self.start_failure = AgentStartupError(startup_failure(self._host.name, record))
