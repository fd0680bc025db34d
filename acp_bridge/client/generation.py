"""One generation of a supervised agent: a single process from spawn to its exit report.

:meth:`Generation.run` spawns the agent (own process group), connects a :class:`JsonRpcPeer`,
runs ``initialize`` (and ``authenticate``) within ``startup_timeout_s``, restores every known
session when this is a restart, and only then attaches the connection to the agent, which makes
it ready. It then serves until the first of: the process exits, its stdout ends, the watchdog
trips, or the supervisor quarantines it. It detaches (calls now wait for the next generation),
builds the :class:`ExitRecord` (killing a process that is still running: it is of no use), and
hands the record to the supervisor's exit callback while the tree is still being reaped, so a
turn in flight fails at once. Leaving :func:`open_agent` then stops the whole process tree.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from anyio.abc import Process

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.events import AgentStarted, LifecycleEvent
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.restore import restore_sessions
from acp_bridge.client.session import Session
from acp_bridge.client.start_diagnosis import StartupWitness, diagnose_start
from acp_bridge.core.restore_plan import RestoreBudget
from acp_bridge.errors import BridgeError, FramingError
from acp_bridge.process import killer
from acp_bridge.process.launcher import AgentProcess, ShutdownTimeouts, open_agent
from acp_bridge.process.policy import ExitRecord
from acp_bridge.process.spec import AgentSpec
from acp_bridge.process.watchdog import WatchdogLimits, watch_rss
from acp_bridge.rpc.peer import JsonRpcPeer

__all__ = ["Generation", "GenerationHost"]

log = logging.getLogger(__name__)


class GenerationHost(Protocol):
    """What a generation needs from its supervisor, and nothing more."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> AgentSpec: ...
    @property
    def options(self) -> ClientOptions: ...
    @property
    def sessions(self) -> list[Session]: ...

    def client_capabilities(self) -> dict[str, Any]: ...
    def client_info(self) -> dict[str, Any]: ...
    def serve(self, peer: JsonRpcPeer, generation: int) -> None:
        """Register the client-side handlers (updates, permissions, fs, terminals) on ``peer``."""

    def emit(self, event: LifecycleEvent) -> None: ...
    def rename_session(self, session: Session, new_id: str) -> None: ...
    def generation_ready(self, number: int, connection: AgentConnection) -> None: ...
    def generation_ending(self, number: int) -> None: ...
    async def generation_exited(self, number: int, record: ExitRecord) -> None:
        """Decide and report while the tree is still being reaped, so turns fail at once."""


class Generation:
    def __init__(
        self, host: GenerationHost, number: int, restoring: bool, adopted: Process | None = None
    ) -> None:
        self._host = host
        self._options = host.options
        self.number = number
        self._restoring = restoring
        self._adopted = adopted  # a process spawned early for this generation, if any
        self._process: AgentProcess | None = None
        self._ended = anyio.Event()
        self._reasons: list[str] = []  # why we ended a process that was still running, if we did
        self._witness = StartupWitness()
        self._start_failure: BaseException | None = None
        self._start_step = "initialize"
        self._quarantined = False  # ended on purpose: see ExitRecord.ordered
        self._shutdown = host.options.shutdown  # the bounds of the process's stop

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def quarantine(self, reason: str) -> None:
        """End this process (killed, then restarted by the supervisor's policy)."""
        if self._process is None or self._ended.is_set():
            return
        self._reasons.insert(0, reason)
        self._quarantined = True
        self._ended.set()

    def use_shutdown(self, bounds: ShutdownTimeouts) -> None:
        """Stop the process tree with ``bounds`` when it is stopped (unless that has begun)."""
        self._shutdown = bounds
        if self._process is not None:
            self._process.shutdown = bounds

    def kill_now(self) -> None:
        """SIGKILL the whole tree at once (a second signal: stop now, no grace)."""
        if self._process is not None:
            self._process.kill_now()
            self._ended.set()

    async def run(self) -> None:
        """Serve one process until it ends, and report its exit to the host.

        Raises:
            SpawnError: the command could not be started (the supervisor decides what follows).
        """
        spawned_at = anyio.current_time()
        async with open_agent(
            self._host.spec,
            base_env=self._options.base_env,
            stderr_forward=self._options.stderr_forward,
            shutdown=self._shutdown,
            process=self._adopted,
        ) as process:
            self._process = process
            await self._serve(process, spawned_at)

    async def _serve(self, process: AgentProcess, spawned_at: float) -> None:
        host = self._host
        peer = JsonRpcPeer(
            process.stdout,
            process.stdin,
            name=host.name,
            max_line_bytes=self._options.max_line_bytes,
        )
        host.serve(peer, self.number)
        if self._options.frame_observer is not None:
            peer.add_observer(self._options.frame_observer)
        peer.add_observer(self._witness)
        peer.invalid_log_level = logging.INFO  # a failed start is diagnosed in one sentence
        connection = AgentConnection(peer, name=host.name)
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            tg.start_soon(self._end_when, peer.wait_closed)
            tg.start_soon(self._end_when, process.wait_exited)
            if self._options.max_tree_rss_bytes is not None:
                tg.start_soon(self._watch_memory, process)
            try:
                await self._start(connection, process)
            except (BridgeError, TimeoutError) as exc:
                # The first start's failure is the caller's error; a restart's is worth a log.
                log.log(
                    logging.INFO if self.number == 1 else logging.WARNING,
                    "%s: start failed: %s",
                    host.name,
                    exc,
                )
                self._start_failure = exc
                self._ended.set()
            else:
                if not self._ended.is_set():
                    host.generation_ready(self.number, connection)
            finally:
                peer.remove_observer(self._witness)
                peer.invalid_log_level = logging.WARNING
            await self._ended.wait()
            host.generation_ending(self.number)
            record = await self._exit_record(process, peer, spawned_at)
            tg.cancel_scope.cancel()
        await host.generation_exited(self.number, record)

    async def _start(self, connection: AgentConnection, process: AgentProcess) -> None:
        host = self._host
        with anyio.fail_after(self._options.startup_timeout_s):
            init = await connection.initialize(host.client_capabilities(), host.client_info())
            if self._options.auth_method is not None:
                self._start_step = "authenticate"
                await connection.authenticate(self._options.auth_method)
        host.emit(
            AgentStarted(
                host.name,
                process.pid,
                init.agent_info.dump() if init.agent_info else None,
                init.protocol_version,
                self.number,
            )
        )
        if self._restoring:
            budget = RestoreBudget(
                self._options.restore_timeout_s, self._options.restore_concurrency
            )
            await restore_sessions(host, connection, host.sessions, budget)

    async def _end_when(self, wait: Callable[[], Awaitable[object]]) -> None:
        await wait()
        self._ended.set()

    async def _watch_memory(self, process: AgentProcess) -> None:
        limits = WatchdogLimits(self._options.max_tree_rss_bytes, self._options.watchdog_interval_s)
        trip = await watch_rss(process.pid, limits)
        self._reasons.append(f"watchdog: {trip.reason}")
        self._ended.set()

    async def _exit_record(
        self, process: AgentProcess, peer: JsonRpcPeer, spawned_at: float
    ) -> ExitRecord:
        """How the process ended. One that is still running is killed first: it was
        quarantined, tripped the watchdog, or closed its stdout (and is no use without it)."""
        reasons = self._reasons
        # A start that failed on a closed stdout (e.g. a script that printed and exited) is
        # worth the wait: its exit status completes the diagnosis.
        failed_start = self._start_failure is not None
        closed_at_start = failed_start and peer.is_closed
        if not process.has_exited and ((not reasons and not failed_start) or closed_at_start):
            # stdout ended first: usually the exit itself, seen a moment before waitpid.
            with anyio.move_on_after(self._options.exit_report_timeout_s):
                await process.wait_exited()
            if not process.has_exited:
                reasons.append(_stdout_reason(peer))
        exited_by_itself = process.has_exited
        if not process.has_exited:
            killer.signal_group(process.pid, signal.SIGKILL)
            with anyio.move_on_after(self._options.shutdown.kill_wait_s):
                await process.wait_exited()
        status = process.exit_status
        described = status.describe() if status else "did not exit"
        if self._start_failure is not None:
            # One sentence about what the command did; how we killed it says nothing.
            reasons = [
                diagnose_start(
                    self._start_failure,
                    self._witness,
                    exit_description=described if exited_by_itself else None,
                    timeout_s=self._options.startup_timeout_s,
                    step=self._start_step,
                )
            ]
            described = ""
        now = anyio.current_time()
        return ExitRecord.of_process(
            now,
            now - spawned_at,
            status.returncode if status else None,
            _joined(reasons[0] if reasons else "", described),
            process.stderr_tail(20),
            ordered=self._quarantined,
        )


def _joined(reason: str, described: str) -> str:
    if reason and described:
        return f"{reason} ({described})"
    return reason or described


def _stdout_reason(peer: JsonRpcPeer) -> str:
    cause = peer.closed_reason
    if cause is not None and isinstance(cause.__cause__, FramingError):
        return f"broke the protocol ({cause.__cause__}); killed"
    return "closed its stdout but kept running; killed"

