"""The proxy's kind of generation, plugged into the one core supervisor.

:class:`RelayLifetime` is what the :class:`~acp_bridge.core.supervisor.Supervisor` calls at each
step of the proxy's agent: it runs one generation as a raw relay (a
:class:`~.generation.RelayGeneration` with its writer, the host's reader and an exit watcher),
restores it through the host when it is a restart, tells the supervisor it is ready, and when it
ends (any reason, see :mod:`.generation`) lets the host cut what was in flight and reports how it
ended. The supervisor decides (the lifecycle machine and the restart policy) and runs the
generation loop; this performs the proxy's side: an ``agent_exited`` event and a log line for
an exit, and the host's ``gave_up`` when the agent is gone for good. Waiters for a ready agent
wake through the supervisor's one condition, notified at every transition.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio

from acp_bridge.core.condition import Condition
from acp_bridge.core.lifecycle import AgentPhase, ReportExit
from acp_bridge.core.supervisor import Supervisor
from acp_bridge.errors import SpawnError
from acp_bridge.process.launcher import open_agent
from acp_bridge.process.policy import ExitRecord, GiveUp, RestartPolicy
from acp_bridge.process.spec import AgentSpec
from acp_bridge.proxy.generation import GenerationEnded, RelayGeneration
from acp_bridge.rpc.framing import ByteBudget

__all__ = ["AgentGone", "RelayHost", "RelayLifetime"]

log = logging.getLogger(__name__)


_STDOUT_ENDS = frozenset({"it closed its stdout", "its stdout broke"})


class AgentGone(Exception):
    """The agent is gone for good (or the proxy is closing): nothing more is forwarded."""


class RelayHost(Protocol):
    """What the relay does at each step of a generation's life."""

    @property
    def stopping(self) -> bool: ...

    async def read_agent(self, gen: RelayGeneration) -> None: ...

    async def restore(self, gen: RelayGeneration) -> list[str]: ...

    async def generation_ready(self, gen: RelayGeneration, lost: list[str]) -> None: ...

    async def generation_gone(self, gen: RelayGeneration) -> None: ...

    async def gave_up(self, why: str) -> None: ...

    def event(self, event: dict[str, Any]) -> None: ...

    def sent_to_agent(self, line: bytes, valid: bool) -> None: ...


class RelayLifetime:
    """The proxy's agent: one :class:`RelayGeneration` at a time, under the core supervisor."""

    def __init__(
        self,
        spec: AgentSpec,
        policy: RestartPolicy,
        host: RelayHost,
        *,
        base_env: Mapping[str, str] | None = None,
        stderr_forward: Callable[[str], None] | None = None,
        budget: ByteBudget | None = None,
    ) -> None:
        self._spec = spec
        self._host = host
        self._budget = budget  # each generation's writer charges it (bytes toward the agent)
        self._base_env = base_env
        self._stderr_forward = stderr_forward
        self.supervisor = Supervisor(spec.name, policy, self)
        self.changed: Condition = self.supervisor.changed
        self.generation: RelayGeneration | None = None

    @property
    def is_ready(self) -> bool:
        gen = self.generation
        return self.supervisor.state is AgentPhase.READY and gen is not None and gen.alive

    async def ready(self) -> RelayGeneration:
        """The current generation once it is ready (restored); waits while it restarts.

        Raises:
            AgentGone: the agent is gone for good, or the proxy is closing.
        """
        while True:
            gen = self.generation
            state = self.supervisor.state
            if state is AgentPhase.READY and gen is not None and gen.alive:
                return gen
            if state in (AgentPhase.GAVE_UP, AgentPhase.CLOSED) or self._host.stopping:
                raise AgentGone
            await self.changed.wait()

    def exit_of(self, number: int) -> ExitRecord | None:
        """How generation ``number`` ended (the last few are kept), else the latest exit."""
        return self.supervisor.exit_of(number) or self.supervisor.last_exit

    async def wait_started(self) -> None:
        """Until the first generation was spawned (or could not be, or the proxy stops)."""
        while self.generation is None and not self._host.stopping:
            await self.changed.wait()

    def shutdown(self) -> None:
        self.supervisor.shutdown()

    async def run(self) -> None:
        """Generations until the proxy stops or the agent is gone for good."""
        try:
            await self.supervisor.run()
        except SpawnError as exc:  # the very first spawn: nothing to keep, say it once
            await self._host.gave_up(str(exc))

    # -- the supervisor's hooks (GenerationKind) -----------------------------------------------

    async def run_generation(self, number: int, restoring: bool) -> None:
        started = anyio.current_time()
        async with open_agent(
            self._spec, base_env=self._base_env, stderr_forward=self._stderr_forward
        ) as process:
            gen = RelayGeneration(
                number,
                process,
                restoring=restoring,
                on_send=self._host.sent_to_agent,
                budget=self._budget,
            )
            self.generation = gen
            self.changed.notify_all()
            self._host.event({"event": "agent_started", "generation": number, "pid": gen.pid})
            await self._live(gen)
            self.supervisor.ending(number)
            if not self._host.stopping:
                await self._host.generation_gone(gen)
        now = anyio.current_time()
        status = process.exit_status
        reason = gen.end_reason or "stopped"
        if status is not None and reason in _STDOUT_ENDS:
            reason = status.describe()  # the stdout ended because the process did
        elif status is not None and status.describe() not in reason:
            reason = f"{reason} ({status.describe()})"
        record = ExitRecord.of_process(
            now,
            max(0.0, now - started),
            None if status is None else status.returncode,
            reason,
            process.stderr_tail(),
            ordered=gen.quarantined,
        )
        await self.supervisor.exited(number, record)

    async def exit_reported(self, report: ReportExit) -> None:
        if report.closing:
            return  # the proxy is stopping: the agent was stopped on purpose
        self._host.event({"event": "agent_exited", "generation": report.number})
        restarting = "; restarting it" if report.will_restart else ""
        log.warning("%s %s%s", self._spec.name, report.record.reason, restarting)

    def restarting(self, attempt: int, delay_s: float) -> None:
        log.debug("%s: restart %d in %g s", self._spec.name, attempt, delay_s)

    async def gave_up(self, decision: GiveUp) -> None:
        await self._host.gave_up(decision.reason)

    async def first_start_failed(self, record: ExitRecord) -> None:
        await self._host.gave_up(f"it could not be started: {record.reason}")

    # -- one generation's tasks ------------------------------------------------------------------

    async def _live(self, gen: RelayGeneration) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run_writer)
            tg.start_soon(self._host.read_agent, gen)
            tg.start_soon(self._watch_exit, gen)
            lost: list[str] = []
            if gen.restoring:
                with contextlib.suppress(GenerationEnded):  # the wait below sees it
                    lost = await self._host.restore(gen)
            if gen.alive:
                gen.restoring = False
                self.supervisor.ready(gen.number)
                await self._host.generation_ready(gen, lost)
            await gen.wait_ended()
            tg.cancel_scope.cancel()

    async def _watch_exit(self, gen: RelayGeneration) -> None:
        status = await gen.process.wait_exited()
        gen.end(status.describe())
