"""The proxy's agent processes, one generation at a time, under the lifecycle machine.

:class:`AgentSupervisor` starts a generation, runs its writer, reader (the host's) and exit
watcher, restores it through the host when it is a restart, marks it ready, and when it ends
(any reason, see :mod:`.generation`) lets the host cut what was in flight, reports the exit to
the restart policy and performs the lifecycle machine's answer: restart after a delay, or give
up. The machine decides; this only performs. Waiters for a ready agent wake through one
condition, notified at every transition.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio

from acp_bridge.core.condition import Condition
from acp_bridge.core.lifecycle import (
    AgentLifecycle,
    AgentPhase,
    DelayElapsed,
    FailFirstStart,
    GenerationEnding,
    GenerationExited,
    GenerationReady,
    GiveUpNow,
    ReportExit,
    ShutdownRequested,
    StartAfter,
    StartGeneration,
)
from acp_bridge.errors import ConnectionClosedError, SpawnError
from acp_bridge.process.launcher import open_agent
from acp_bridge.process.policy import ExitRecord, RestartPolicy
from acp_bridge.process.spec import AgentSpec
from acp_bridge.proxy.generation import Generation, GenerationEnded

__all__ = ["AgentGone", "AgentSupervisor", "SupervisorHost"]

log = logging.getLogger(__name__)


_STDOUT_ENDS = frozenset({"it closed its stdout", "its stdout broke"})


class AgentGone(Exception):
    """The agent is gone for good (or the proxy is closing): nothing more is forwarded."""


class SupervisorHost(Protocol):
    """What the relay does at each step of a generation's life."""

    @property
    def stopping(self) -> bool: ...

    async def read_agent(self, gen: Generation) -> None: ...

    async def restore(self, gen: Generation) -> list[str]: ...

    async def generation_ready(self, gen: Generation, lost: list[str]) -> None: ...

    async def generation_gone(self, gen: Generation) -> None: ...

    async def gone_for_good(self, why: str) -> None: ...

    def event(self, event: dict[str, Any]) -> None: ...

    def sent_to_agent(self, line: bytes, valid: bool) -> None: ...


class AgentSupervisor:
    def __init__(
        self,
        spec: AgentSpec,
        policy: RestartPolicy,
        host: SupervisorHost,
        *,
        base_env: Mapping[str, str] | None = None,
        stderr_forward: Callable[[str], None] | None = None,
    ) -> None:
        self._spec = spec
        self._policy = policy
        self._host = host
        self._base_env = base_env
        self._stderr_forward = stderr_forward
        self.lifecycle = AgentLifecycle()
        self.changed = Condition()
        self.generation: Generation | None = None
        self.last_exit: ExitRecord | None = None
        """How the previous generation ended (for the answers to what its exit cut)."""

    @property
    def is_ready(self) -> bool:
        gen = self.generation
        return self.lifecycle.state is AgentPhase.READY and gen is not None and gen.alive

    async def ready(self) -> Generation:
        """The current generation once it is ready (restored); waits while it restarts.

        Raises:
            AgentGone: the agent is gone for good, or the proxy is closing.
        """
        while True:
            gen = self.generation
            state = self.lifecycle.state
            if state is AgentPhase.READY and gen is not None and gen.alive:
                return gen
            if state in (AgentPhase.GAVE_UP, AgentPhase.CLOSED) or self._host.stopping:
                raise AgentGone
            await self.changed.wait()

    def exit_of(self, number: int) -> ExitRecord | None:
        """How generation ``number`` ended (the last few are kept), else the latest exit."""
        report = self.lifecycle.exits.get(number)
        return report.record if report is not None else self.last_exit

    async def wait_started(self) -> None:
        """Until the first generation was spawned (or could not be, or the proxy stops)."""
        while self.generation is None and not self._host.stopping:
            await self.changed.wait()

    def shutdown(self) -> None:
        self.lifecycle.handle(ShutdownRequested())
        self.changed.notify_all()

    async def run(self) -> None:
        """Generations until the proxy stops or the agent is gone for good."""
        number, restoring = 1, False
        while True:
            record = await self._run_generation(number, restoring)
            if record is None or self._host.stopping:
                return
            self.last_exit = record
            history = [*self.lifecycle.history, record]
            decision = self._policy.decide(history, record.at_s, name=self._spec.name)
            actions = list(self.lifecycle.handle(GenerationExited(number, record, decision)))
            self.changed.notify_all()
            while actions:
                action = actions.pop(0)
                if isinstance(action, ReportExit):
                    self._host.event({"event": "agent_exited", "generation": number})
                    restarting = "; restarting it" if action.will_restart else ""
                    log.warning("%s %s%s", self._spec.name, record.reason, restarting)
                elif isinstance(action, StartAfter):
                    await anyio.sleep(action.delay_s)
                    actions += self.lifecycle.handle(DelayElapsed(action.number))
                elif isinstance(action, StartGeneration):
                    number, restoring = action.number, action.restoring
                elif isinstance(action, GiveUpNow):
                    await self._host.gone_for_good(action.decision.reason)
                    return
                elif isinstance(action, FailFirstStart):
                    await self._host.gone_for_good(f"it could not be started: {record.reason}")
                    return

    async def _run_generation(self, number: int, restoring: bool) -> ExitRecord | None:
        """Run one generation; how it ended (None: the first one could not even start)."""
        started = anyio.current_time()
        try:
            async with open_agent(
                self._spec, base_env=self._base_env, stderr_forward=self._stderr_forward
            ) as process:
                gen = Generation(
                    number, process, restoring=restoring, on_send=self._host.sent_to_agent
                )
                self.generation = gen
                self.changed.notify_all()
                self._host.event({"event": "agent_started", "generation": number, "pid": gen.pid})
                await self._live(gen)
                if not self._host.stopping:
                    self.lifecycle.handle(GenerationEnding(number))
                    self.changed.notify_all()
                    await self._host.generation_gone(gen)
        except SpawnError as exc:
            if number == 1:
                await self._host.gone_for_good(str(exc))
                return None
            now = anyio.current_time()
            return ExitRecord(now, 0.0, None, None, f"could not be restarted: {exc}")
        now = anyio.current_time()
        status = process.exit_status
        reason = gen.end_reason or "stopped"
        if status is not None and reason in _STDOUT_ENDS:
            reason = status.describe()  # the stdout ended because the process did
        elif status is not None and status.describe() not in reason:
            reason = f"{reason} ({status.describe()})"
        return ExitRecord(
            now,
            max(0.0, now - started),
            None if status is None or status.signal is not None else status.returncode,
            None if status is None else status.signal,
            reason,
            process.stderr_tail(),
            ordered=gen.quarantined,
        )

    async def _live(self, gen: Generation) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._write_agent, gen)
            tg.start_soon(self._host.read_agent, gen)
            tg.start_soon(self._watch_exit, gen)
            lost: list[str] = []
            if gen.restoring:
                with contextlib.suppress(GenerationEnded):  # the wait below sees it
                    lost = await self._host.restore(gen)
            if gen.alive:
                gen.restoring = False
                self.lifecycle.handle(GenerationReady(gen.number))
                self.changed.notify_all()
                await self._host.generation_ready(gen, lost)
            await gen.wait_ended()
            tg.cancel_scope.cancel()

    async def _write_agent(self, gen: Generation) -> None:
        try:
            await gen.writer.run()
        except ConnectionClosedError:
            gen.end("it stopped reading its stdin")

    async def _watch_exit(self, gen: Generation) -> None:
        status = await gen.process.wait_exited()
        gen.end(status.describe())
