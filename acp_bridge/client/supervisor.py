"""A supervised agent: one process at a time, restarted by policy, its sessions restored.

Lifetime of each generation (one agent process):

1. spawn (own process group), connect a :class:`JsonRpcPeer`, ``initialize`` (and
   ``authenticate``) within ``startup_timeout_s``;
2. after a restart, restore every known session: ``session/load`` if the agent has
   ``loadSession`` (the replay is consumed into ``Session.history``, never shown as new output),
   else ``session/resume``, else ``session/new`` under a new id, reported as
   :class:`SessionReplaced`. Only then is the agent *ready* again: the "needs restart" state is
   cleared after a full restore, never before, and a failed restore counts as a failed start;
3. serve until the process ends: its exit, its stdout closing, the watchdog, or a quarantine;
4. build the exit report, ask the restart policy, fail every turn in flight with an
   :class:`AgentExitedError` that says whether the session will be restored (the lost prompt is
   never re-sent by itself), close their open tool calls once, and stop the whole process tree.

Then restart after the policy's delay, or give up (:class:`AgentGaveUp`; calls fail with
:class:`RestartLimitError` until :meth:`SupervisedAgent.revive`). A failure of the very first
start is raised to the caller of :func:`open_supervised_agent` instead: there is no session to
keep yet, and a wrong command should fail fast.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.events import (
    AgentExited,
    AgentGaveUp,
    AgentRestarting,
    AgentStarted,
    LifecycleEvent,
)
from acp_bridge.client.handlers import ClientHandlers
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.restore import restore_session
from acp_bridge.client.session import Session
from acp_bridge.client.turn import Turn
from acp_bridge.errors import (
    AgentExitedError,
    AgentStartupError,
    BridgeError,
    ConnectionClosedError,
    FramingError,
    ResourceClosedError,
    RestartLimitError,
    RpcError,
    SpawnError,
)
from acp_bridge.process import killer
from acp_bridge.process.launcher import AgentProcess, open_agent
from acp_bridge.process.policy import Decision, ExitRecord, GiveUp, format_exit_history
from acp_bridge.process.spec import AgentSpec
from acp_bridge.process.watchdog import WatchdogLimits, watch_rss
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.wire.acp import PromptResponse, SessionInfo

__all__ = ["SupervisedAgent", "open_supervised_agent"]

log = logging.getLogger(__name__)

_EVENT_LOG_SIZE = 1000
_T = TypeVar("_T")


class SupervisedAgent:
    """An ACP agent kept alive across crashes. Use :func:`open_supervised_agent`."""

    def __init__(self, spec: AgentSpec, options: ClientOptions, task_group: TaskGroup) -> None:
        self.spec = spec
        self.name = spec.name
        self.options = options
        self._task_group = task_group
        self._handlers = ClientHandlers(self)
        self._sessions: dict[str, Session] = {}
        self._connection: AgentConnection | None = None
        self._process: AgentProcess | None = None
        self._ready = anyio.Event()
        self._failed: BaseException | None = None
        self._closing = False
        self._history: list[ExitRecord] = []
        self._generation = 0
        self._quarantine_reason: str | None = None
        self._quarantine = anyio.Event()
        self._lifetime_over = anyio.Event()
        self._exit_failures: dict[int, AgentExitedError] = {}
        self._exit_known: dict[int, anyio.Event] = {}
        self._subscribers: list[MemoryObjectSendStream[LifecycleEvent]] = []
        self.event_log: deque[LifecycleEvent] = deque(maxlen=_EVENT_LOG_SIZE)
        """The most recent lifecycle events, oldest first."""

    def __repr__(self) -> str:
        state = "failed" if self._failed else "ready" if self._ready.is_set() else "starting"
        return f"<SupervisedAgent {self.name!r} [{state}, generation {self._generation}]>"

    # -- state --------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """How many processes have been started (1 before any restart)."""
        return self._generation

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set() and self._failed is None

    @property
    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    @property
    def connection(self) -> AgentConnection:
        """The current process's connection (it changes with every restart).

        Raises:
            AgentExitedError: no process is ready right now.
        """
        if self._connection is None:
            raise AgentExitedError(f"{self.name} is not running right now", recoverable=True)
        return self._connection

    async def wait_ready(self) -> AgentConnection:
        """The current connection, waiting through a restart in progress.

        Raises:
            RestartLimitError: the agent is gone for good (see :meth:`revive`).
            ResourceClosedError: the agent was closed.
        """
        while True:
            if self._failed is not None:
                raise self._failed
            if self._closing:
                raise ResourceClosedError(f"{self.name} was closed")
            if self._ready.is_set() and self._connection is not None:
                return self._connection
            await self._ready.wait()

    async def call(self, method: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """``await method(connection, *args)`` on the current process.

        If the process dies during the call, the caller gets the :class:`AgentExitedError` that
        says how it ended (and whether it is being restarted), not a bare connection error.
        """
        connection = await self.wait_ready()
        generation = self._generation
        try:
            return await method(connection, *args)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            raise await self.exit_failure(generation) from exc

    async def exit_failure(self, generation: int) -> BaseException:
        """The error describing how process ``generation`` ended, once that is known."""
        known = self._exit_known.setdefault(generation, anyio.Event())
        bound = self.options.exit_report_timeout_s + self.options.shutdown.kill_wait_s + 1.0
        with anyio.move_on_after(bound):
            await known.wait()
        failure = self._exit_failures.get(generation)
        if failure is not None:
            return failure
        if self._closing:
            return ResourceClosedError(f"{self.name} was closed")
        return AgentExitedError(f"{self.name} stopped answering", recoverable=True)

    def subscribe(self) -> MemoryObjectReceiveStream[LifecycleEvent]:
        """A stream of lifecycle events from now on (unbounded: they are rare)."""
        send, receive = anyio.create_memory_object_stream[LifecycleEvent](math.inf)
        self._subscribers.append(send)
        return receive

    def emit(self, event: LifecycleEvent) -> None:
        self.event_log.append(event)
        log.info("%s: %s", self.name, event)
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.remove(send)

    # -- sessions -----------------------------------------------------------------------------

    async def new_session(
        self,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]] = (),
        additional_directories: Sequence[Path] = (),
    ) -> Session:
        response = await self.call(
            AgentConnection.new_session, cwd, mcp_servers, additional_directories
        )
        session = Session(
            self,
            response.session_id,
            cwd=cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
        )
        session.offer(response.modes, response.config_options)
        self._sessions[session.id] = session
        return session

    async def list_sessions(self, cwd: Path | None = None) -> list[SessionInfo]:
        """Every session the agent knows (all pages), optionally only those in ``cwd``.

        Raises:
            LocalProtocolError: the agent does not support ``session/list``.
        """
        sessions: list[SessionInfo] = []
        cursor: str | None = None
        while True:
            page = await self.call(AgentConnection.list_sessions, cwd, cursor)
            sessions.extend(page.sessions)
            cursor = page.next_cursor
            if not cursor:
                return sessions

    async def load_session(
        self,
        session_id: str,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]] = (),
        additional_directories: Sequence[Path] = (),
    ) -> Session:
        """Open an existing session; its replayed past is in ``Session.history``."""
        session = Session(
            self,
            session_id,
            cwd=cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
        )
        session.replay = []
        self._sessions[session_id] = session
        try:
            response = await self.call(
                AgentConnection.load_session, session_id, cwd, mcp_servers, additional_directories
            )
            session.offer(response.modes, response.config_options)
        except BaseException:
            del self._sessions[session_id]
            raise
        finally:
            session.history, session.replay = session.replay or [], None
        return session

    async def resume_session(
        self,
        session_id: str,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]] = (),
        additional_directories: Sequence[Path] = (),
    ) -> Session:
        """Reattach to an existing session without a replay."""
        response = await self.call(
            AgentConnection.resume_session, session_id, cwd, mcp_servers, additional_directories
        )
        session = Session(
            self,
            session_id,
            cwd=cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
        )
        session.offer(response.modes, response.config_options)
        self._sessions[session_id] = session
        return session

    def session(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def rename_session(self, session: Session, new_id: str) -> None:
        """A restore had to open a new session: re-key it (the Session object stays)."""
        self._sessions.pop(session.id, None)
        session.id = new_id
        self._sessions[new_id] = session

    async def close_session(self, session: Session) -> None:
        session.closed = True
        self._sessions.pop(session.id, None)
        connection = self._connection
        if connection is not None and connection.capabilities.supports_close():
            try:
                await connection.close_session(session.id)
            except (RpcError, ConnectionClosedError, ResourceClosedError) as exc:
                log.info("%s: session/close for %s failed: %s", self.name, session.id, exc)

    # -- turns ----------------------------------------------------------------------------------

    async def start_turn(self, session: Session, turn: Turn, blocks: list[dict[str, Any]]) -> None:
        connection = await self.wait_ready()
        self._task_group.start_soon(self._drive_turn, connection, session, turn, blocks)

    async def _drive_turn(
        self,
        connection: AgentConnection,
        session: Session,
        turn: Turn,
        blocks: list[dict[str, Any]],
    ) -> None:
        try:
            response: PromptResponse = await connection.prompt(session.id, blocks)
        except (ConnectionClosedError, ResourceClosedError):
            # The process ended: the supervisor fails the turn with the exit report, which
            # says how the agent ended and whether the session is being restored.
            return
        except BridgeError as exc:
            await turn.fail(exc)
            return
        await turn.finish(response)

    async def cancel_turn(self, session: Session) -> None:
        """``session/cancel`` for the session's running turn; answer its permission requests."""
        for scope in list(session.permission_scopes):
            scope.cancel()
        connection = self._connection
        if connection is None:
            return
        try:
            await connection.cancel(session.id)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            log.info("%s: could not send session/cancel: %s", self.name, exc)

    async def quarantine(self, reason: str) -> None:
        """Kill the current process tree and go through the restart path (and its policy)."""
        if self._process is None or self._quarantine.is_set():
            return
        self._quarantine_reason = reason
        self._quarantine.set()
        await anyio.lowlevel.checkpoint()

    async def revive(self) -> None:
        """After a give-up: start a fresh agent (new restart budget) and restore the sessions.

        Returns at once; calls wait for the new process as they would through a restart.
        """
        if self._failed is None or self._closing:
            return
        await self._lifetime_over.wait()  # the old loop is still stopping its last process
        self._failed = None
        self._history.clear()
        self._ready = anyio.Event()
        self._lifetime_over = anyio.Event()
        self._task_group.start_soon(self._run_generations, True)

    # -- the lifetime loop ------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Supervise until closed or given up; ``started`` once the first process is ready.

        Raises:
            SpawnError, AgentStartupError: the very first start failed.
        """
        await self._run_generations(False, task_status=task_status)

    async def _run_generations(
        self, restoring: bool, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            await self._supervise(restoring, task_status)
        finally:
            self._lifetime_over.set()

    async def _supervise(self, restoring: bool, task_status: TaskStatus[None]) -> None:
        reported_ready = False
        while True:
            self._generation += 1
            record, decision, was_ready = await self._run_generation(
                restoring, None if reported_ready else task_status
            )
            if self._closing:
                return
            if was_ready:
                reported_ready = True
            elif not reported_ready and not restoring:
                # The very first start failed: the caller of open_supervised_agent hears it.
                raise AgentStartupError(_startup_failure(self.name, record))
            restoring = True
            if isinstance(decision, GiveUp):
                return
            self.emit(AgentRestarting(self.name, decision.attempt, decision.delay_s))
            await anyio.sleep(decision.delay_s)

    async def _run_generation(
        self, restoring: bool, task_status: TaskStatus[None] | None
    ) -> tuple[ExitRecord, Decision, bool]:
        self._quarantine = anyio.Event()
        self._quarantine_reason = None
        spawned_at = time.monotonic()
        try:
            async with open_agent(
                self.spec,
                base_env=self.options.base_env,
                stderr_forward=self.options.stderr_forward,
                shutdown=self.options.shutdown,
            ) as process:
                self._process = process
                try:
                    return await self._serve_process(process, restoring, task_status, spawned_at)
                finally:
                    self._process = None
        except SpawnError as exc:
            if self._generation == 1:
                raise
            record = ExitRecord(time.monotonic(), 0.0, None, None, str(exc))
            return record, await self._on_exit(record, pid=0), False

    async def _serve_process(
        self,
        process: AgentProcess,
        restoring: bool,
        task_status: TaskStatus[None] | None,
        spawned_at: float,
    ) -> tuple[ExitRecord, Decision, bool]:
        peer = JsonRpcPeer(
            process.stdout,
            process.stdin,
            name=self.name,
            max_line_bytes=self.options.max_line_bytes,
        )
        self._handlers.register(peer)
        connection = AgentConnection(peer, name=self.name)
        ended = anyio.Event()
        was_ready = False
        reason: list[str] = []  # why we ended a process that was still running, if we did
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            tg.start_soon(_set_when, peer.wait_closed, ended)
            tg.start_soon(_set_when, process.wait_exited, ended)
            tg.start_soon(_set_when, self._quarantine.wait, ended)
            if self.options.max_tree_rss_bytes is not None:
                tg.start_soon(self._watch_memory, process, ended, reason)
            try:
                await self._start(connection, process, restoring, ended)
            except (BridgeError, TimeoutError) as exc:
                log.warning("%s: start failed: %s", self.name, exc)
                reason.append(_start_failure_reason(exc))
                ended.set()
            else:
                self._connection = connection
                was_ready = True
                self._ready.set()
                if task_status is not None:
                    task_status.started()
            await ended.wait()
            self._connection = None
            self._ready = anyio.Event()
            record = await self._exit_record(process, peer, reason, spawned_at)
            tg.cancel_scope.cancel()
        return record, await self._on_exit(record, pid=process.pid), was_ready

    async def _start(
        self,
        connection: AgentConnection,
        process: AgentProcess,
        restoring: bool,
        ended: anyio.Event,
    ) -> None:
        with anyio.fail_after(self.options.startup_timeout_s):
            init = await connection.initialize(
                self._handlers.client_capabilities(), self._handlers.client_info()
            )
            if self.options.auth_method is not None:
                await connection.authenticate(self.options.auth_method)
        self.emit(
            AgentStarted(
                self.name,
                process.pid,
                init.agent_info.dump() if init.agent_info else None,
                init.protocol_version,
                self._generation,
            )
        )
        if restoring:
            with anyio.fail_after(self.options.restore_timeout_s):
                for session in list(self._sessions.values()):
                    await restore_session(self, connection, session)

    async def _watch_memory(
        self, process: AgentProcess, ended: anyio.Event, reason: list[str]
    ) -> None:
        limits = WatchdogLimits(self.options.max_tree_rss_bytes, self.options.watchdog_interval_s)
        trip = await watch_rss(process.pid, limits)
        reason.append(f"watchdog: {trip.reason}")
        ended.set()

    async def _exit_record(
        self, process: AgentProcess, peer: JsonRpcPeer, reasons: list[str], spawned_at: float
    ) -> ExitRecord:
        """How the process ended. One that is still running is killed first: it was
        quarantined, tripped the watchdog, or closed its stdout (and is no use without it)."""
        if self._quarantine.is_set():
            reasons.insert(0, self._quarantine_reason or "quarantined")
        if not process.has_exited and not reasons:
            # stdout ended first: usually the exit itself, seen a moment before waitpid.
            with anyio.move_on_after(self.options.exit_report_timeout_s):
                await process.wait_exited()
            if not process.has_exited:
                reasons.append(_stdout_reason(peer))
        if not process.has_exited:
            killer.signal_group(process.pid, signal.SIGKILL)
            with anyio.move_on_after(self.options.shutdown.kill_wait_s):
                await process.wait_exited()
        status = process.exit_status
        described = status.describe() if status else "did not exit"
        return ExitRecord(
            at_s=time.monotonic(),
            uptime_s=time.monotonic() - spawned_at,
            returncode=status.returncode if status else None,
            signal=status.signal if status else None,
            reason=f"{reasons[0]} ({described})" if reasons else described,
            stderr_tail=process.stderr_tail(20),
        )

    async def _on_exit(self, record: ExitRecord, *, pid: int) -> Decision:
        """Decide, report, and fail the turns in flight, while the tree is still being reaped."""
        decision = self.options.restart.decide(
            [*self._history, record], time.monotonic(), name=self.name
        )
        self._history.append(record)
        will_restart = not self._closing and not isinstance(decision, GiveUp)
        self.emit(
            AgentExited(
                self.name,
                pid,
                record.returncode,
                record.signal,
                record.reason,
                record.stderr_tail,
                will_restart,
            )
        )
        if isinstance(decision, GiveUp) and not self._closing:
            self._failed = RestartLimitError(
                f"{decision.reason}\n{format_exit_history(decision.history)}",
                history=list(decision.history),
            )
            self.emit(AgentGaveUp(self.name, decision.reason, _history_lines(decision.history)))
            self._ready.set()  # wake waiters: they see the failure
        failure = _turn_failure(self.name, record, will_restart, pid)
        self._exit_failures[self._generation] = failure
        self._exit_failures.pop(self._generation - 8, None)
        self._exit_known.setdefault(self._generation, anyio.Event()).set()
        self._exit_known.pop(self._generation - 8, None)
        if not self._closing:
            for session in list(self._sessions.values()):
                turn = session.current_turn
                if turn is not None and not turn.is_done:
                    await turn.fail(failure)
        return decision

    # -- shutdown -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        self._closing = True
        for session in list(self._sessions.values()):
            turn = session.current_turn
            if turn is not None and not turn.is_done:
                await turn.fail(ResourceClosedError(f"{self.name} was closed during the turn"))
        for send in self._subscribers:
            send.close()
        self._ready.set()


async def _set_when(wait: Any, ended: anyio.Event) -> None:
    await wait()
    ended.set()


def _stdout_reason(peer: JsonRpcPeer) -> str:
    cause = peer.closed_reason
    if cause is not None and isinstance(cause.__cause__, FramingError):
        return f"broke the protocol ({cause.__cause__}); killed"
    return "closed its stdout but kept running; killed"


def _start_failure_reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "did not finish initializing in time"
    return f"failed to start: {exc}"


def _startup_failure(name: str, record: ExitRecord) -> str:
    tail = f"\nLast stderr lines:\n{record.stderr_tail}" if record.stderr_tail else ""
    return (
        f"{name} could not be started: {record.reason}. Check the agent command, its "
        f"installation and its credentials.{tail}"
    )


def _turn_failure(name: str, record: ExitRecord, will_restart: bool, pid: int) -> AgentExitedError:
    next_step = (
        "restarting it and restoring the session; the interrupted prompt is not re-sent"
        if will_restart
        else "not restarting it (restart limit reached)"
    )
    last_lines = "\n".join(record.stderr_tail.splitlines()[-10:])
    tail = f"\nLast stderr lines of the agent:\n{last_lines}" if last_lines else ""
    return AgentExitedError(
        f"agent {name!r} (pid {pid}): {record.reason}; {next_step}{tail}",
        returncode=record.returncode,
        signal=record.signal,
        stderr_tail=record.stderr_tail,
        recoverable=will_restart,
    )


def _history_lines(history: Sequence[ExitRecord]) -> tuple[str, ...]:
    return tuple(format_exit_history(history).splitlines())


@asynccontextmanager
async def open_supervised_agent(
    spec: AgentSpec, options: ClientOptions | None = None
) -> AsyncIterator[SupervisedAgent]:
    """Start ``spec`` supervised; return once it answered ``initialize``.

    On exit every turn in flight fails, the agent and its whole process tree are stopped, and
    client-side terminals are killed.

    Raises:
        SpawnError: the command could not be started.
        AgentStartupError: the agent started but could not be initialized.
    """
    options = options or ClientOptions()
    try:
        async with anyio.create_task_group() as tg:
            agent = SupervisedAgent(spec, options, tg)
            await agent._handlers.start(tg)
            await tg.start(agent.run)
            try:
                yield agent
            finally:
                with anyio.CancelScope(shield=True):
                    await agent.aclose()
                    await agent._handlers.aclose()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise
