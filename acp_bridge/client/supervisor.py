"""A supervised agent: one process at a time, restarted by policy, its sessions restored.

Each process is a :class:`~acp_bridge.client.generation.Generation` (spawn, initialize,
restore the sessions, serve, report the exit). Between generations the restart policy decides:
restart after its delay, or give up (:class:`AgentGaveUp`; calls then fail with
:class:`RestartLimitError` until :meth:`SupervisedAgent.revive`). A failure of the very first
start is raised to the caller of :func:`open_supervised_agent` instead: there is no session to
keep yet, and a wrong command should fail fast.

The agent is *ready* only between a generation's full restore and its end; calls made in
between wait for readiness (``wait_ready``), so nothing reaches a process whose sessions are
not restored yet. A call cut short by the process's death raises the
:class:`AgentExitedError` describing that death, never a bare connection error.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.abc import Process, TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.events import EventHub, LifecycleEvent
from acp_bridge.client.handlers import ClientHandlers
from acp_bridge.client.lifetime import AgentLifetime
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.session import Session
from acp_bridge.client.session_registry import SessionRegistry
from acp_bridge.client.turn import Turn
from acp_bridge.core.lifecycle import AgentPhase
from acp_bridge.errors import (
    AgentExitedError,
    AuthRequiredError,
    BridgeError,
    ConnectionClosedError,
    ResourceClosedError,
)
from acp_bridge.process.launcher import SETTLED_SHUTDOWN, ShutdownTimeouts
from acp_bridge.process.policy import ExitRecord
from acp_bridge.process.spec import AgentSpec
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.wire.acp import PromptAnswer, SessionInfo

__all__ = ["SupervisedAgent", "open_supervised_agent"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class SupervisedAgent:
    """An ACP agent kept alive across crashes. Use :func:`open_supervised_agent`.

    Its lifecycle is the one :class:`~acp_bridge.core.supervisor.Supervisor` of the core (the
    lifecycle machine, its condition, the generation loop); :class:`AgentLifetime` is the
    library's kind of generation plugged into it (a typed client connection, the library's
    events and errors), and :class:`SessionRegistry` opens and keeps the sessions.
    """

    def __init__(self, spec: AgentSpec, options: ClientOptions, task_group: TaskGroup) -> None:
        self.spec = spec
        self.name = spec.name
        self.options = options
        self._task_group = task_group
        self._handlers = ClientHandlers(self.name, options, self.session)
        self._sessions = SessionRegistry(
            self, lambda: self._connection, self._handlers.claim_commands
        )
        self._connection: AgentConnection | None = None
        self._lifetime = AgentLifetime(self, self._fail_turns)
        self._supervisor = self._lifetime.supervisor
        self._lifecycle = self._supervisor.lifecycle
        self._changed = self._supervisor.changed
        self.auth_failure: AuthRequiredError | None = None
        """The last turn the agent refused for want of authentication (it pauses the queue)."""
        self._events = EventHub(agent_name=self.name)
        self._restart_needed: Callable[[], bool] | None = None

    def __repr__(self) -> str:
        machine = self._lifecycle
        state = f"{machine.state.value}, generation {machine.generation}"
        return f"<SupervisedAgent {self.name!r} [{state}]>"

    # -- state --------------------------------------------------------------------------------

    @property
    def state(self) -> AgentPhase:
        return self._lifecycle.state

    @property
    def generation(self) -> int:
        """How many processes have been started (1 before any restart)."""
        return self._lifecycle.generation

    @property
    def pid(self) -> int | None:
        return self._lifetime.pid

    @property
    def handlers(self) -> ClientHandlers:
        return self._handlers

    @property
    def is_failed(self) -> bool:
        """The restart policy gave up (see :meth:`revive`)."""
        return self._lifecycle.state is AgentPhase.GAVE_UP

    @property
    def is_ready(self) -> bool:
        return self._lifecycle.state is AgentPhase.READY

    @property
    def sessions(self) -> list[Session]:
        return self._sessions.all

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
        """The current connection, waiting through a start or restart in progress.

        Raises:
            RestartLimitError: the agent is gone for good (see :meth:`revive`).
            ResourceClosedError: the agent was closed.
        """
        while True:
            state = self._lifecycle.state
            if state is AgentPhase.READY:
                assert self._connection is not None
                return self._connection
            if state is AgentPhase.GAVE_UP:
                assert self._lifetime.limit_error is not None
                raise self._lifetime.limit_error
            if state is AgentPhase.CLOSED:
                raise self._lifetime.start_failure or ResourceClosedError(f"{self.name} was closed")
            await self._changed.wait()

    async def call(self, method: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """``await method(connection, *args)`` on the current process.

        If the process dies during the call, the caller gets the :class:`AgentExitedError` that
        says how it ended (and whether it is being restarted), not a bare connection error.
        """
        connection = await self.wait_ready()
        generation = self._lifecycle.generation
        try:
            return await method(connection, *args)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            raise await self.exit_failure(generation) from exc

    async def exit_failure(self, generation: int) -> BaseException:
        """How process ``generation`` ended, as an error (see ``AgentLifetime.exit_failure``)."""
        return await self._lifetime.exit_failure(generation)

    def subscribe(self) -> MemoryObjectReceiveStream[LifecycleEvent]:
        """A stream of lifecycle events from now on."""
        return self._events.subscribe()

    def listen(self, listener: Callable[[LifecycleEvent], None]) -> Callable[[], None]:
        """Hear every lifecycle event synchronously, as it happens (see ``EventHub.listen``);
        returns the function that stops listening."""
        return self._events.listen(listener)

    def emit(self, event: LifecycleEvent) -> None:
        self._events.emit(event)

    @property
    def event_log(self) -> Sequence[LifecycleEvent]:
        """The most recent lifecycle events, oldest first."""
        return self._events.log

    # -- sessions -----------------------------------------------------------------------------

    async def new_session(
        self,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]] = (),
        additional_directories: Sequence[Path] = (),
    ) -> Session:
        return await self._sessions.new(cwd, mcp_servers, additional_directories)

    async def list_sessions(self, cwd: Path | None = None) -> list[SessionInfo]:
        """Every session the agent knows (all pages), optionally only those in ``cwd``.

        Raises:
            LocalProtocolError: the agent does not support ``session/list``.
        """
        return await self._sessions.listed(cwd)

    async def load_session(
        self,
        session_id: str,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]] = (),
        additional_directories: Sequence[Path] = (),
    ) -> Session:
        """Open an existing session; its replayed past is in ``Session.history``."""
        return await self._sessions.load(session_id, cwd, mcp_servers, additional_directories)

    async def resume_session(
        self,
        session_id: str,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]] = (),
        additional_directories: Sequence[Path] = (),
    ) -> Session:
        """Reattach to an existing session without a replay."""
        return await self._sessions.resume(session_id, cwd, mcp_servers, additional_directories)

    def session(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def rename_session(self, session: Session, new_id: str) -> None:
        """A restore had to open a new session: re-key it (the Session object stays)."""
        self._sessions.rename(session, new_id)

    async def close_session(self, session: Session) -> None:
        await self._sessions.close(session)

    # -- turns ----------------------------------------------------------------------------------

    async def start_turn(self, session: Session, turn: Turn, blocks: list[dict[str, Any]]) -> None:
        """Send the turn's prompt; its answer ends the turn from the reader, with no task.

        Raises:
            AgentExitedError: the process died before the prompt could be written.
        """
        connection = await self.wait_ready()
        generation = self._lifecycle.generation

        def settled(outcome: Callable[[], PromptAnswer]) -> None:
            try:
                answer = outcome()
            except (ConnectionClosedError, ResourceClosedError):
                # The process ended: the exit report fails the turn, saying how the agent
                # ended and whether the session is being restored.
                return
            except BridgeError as exc:
                if isinstance(exc, AuthRequiredError):
                    self.auth_failure = exc
                turn.fail_now(exc)
                return
            turn.finish_now(answer)

        try:
            await connection.start_prompt(session.id, blocks, settled)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            raise await self.exit_failure(generation) from exc

    async def cancel_turn(self, session: Session) -> bool:
        """``session/cancel`` for the session's running turn; answer its permission requests.

        False only when the agent's stdin stayed too full to take the line for
        ``cancel_write_timeout_s``. With no process to write to, True: its exit report ends
        the turn."""
        for scope in list(session.permission_scopes):
            scope.cancel()
        connection = self._connection
        if connection is None:
            return True
        try:
            return await connection.cancel(
                session.id, timeout_s=self.options.cancel_write_timeout_s
            )
        except (ConnectionClosedError, ResourceClosedError) as exc:
            log.info("%s: could not send session/cancel: %s", self.name, exc)
            return True

    async def quarantine(self, reason: str) -> None:
        """Kill the current process tree and go through the restart path (and its policy)."""
        if self._lifetime.current is not None:
            self._lifetime.current.quarantine(reason)
        await anyio.lowlevel.checkpoint()

    def stop_restarting(self) -> None:
        """The bridge is stopping: no process is started again (a quarantine or crash from
        now on ends the agent, and fails its turns in flight). Calls that need a ready agent
        fail with ``ResourceClosedError``; the running process still serves a cancel."""
        self._supervisor.shutdown()

    def restart_only_if(self, needed: Callable[[], bool]) -> None:
        """From now on, restart the agent after an exit (a crash, a quarantine) only if
        ``needed()``, asked at that exit, says something still waits for it. Otherwise no
        process is started again (as after :meth:`stop_restarting`): the exit is reported as
        the bridge stopping, and a turn it cut fails recoverable, for a later retry.

        For a caller whose input has ended (a one-shot run): a crash on its last message must
        not start a process only to stop it."""
        self._restart_needed = needed

    def expect_nothing_more(self, shutdown: ShutdownTimeouts = SETTLED_SHUTDOWN) -> None:
        """Nothing more will be asked of the agent (a one-shot run whose messages all ended and
        were recorded): start no process again, and when the agent is closed, stop the current
        process tree within ``shutdown``'s bounds (by default a short EOF window, then SIGTERM,
        then SIGKILL: see :data:`~acp_bridge.process.launcher.SETTLED_SHUTDOWN`) rather than
        wait for the agent's own teardown."""
        self.stop_restarting()
        self._lifetime.use_shutdown(shutdown)

    def kill_now(self) -> None:
        """SIGKILL the current process tree at once, with no grace, and start nothing again
        (a second signal: stop now)."""
        self.stop_restarting()
        if self._lifetime.current is not None:
            self._lifetime.current.kill_now()

    async def revive(self) -> None:
        """After a give-up: start a fresh agent (new restart budget) and restore the sessions.

        Returns at once; calls wait for the new process as they would through a restart.
        """
        self._supervisor.revive(self._task_group)
        await anyio.lowlevel.checkpoint()

    # -- the lifecycle machine and what performs it ------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Supervise until closed or given up; ``started`` once the first process is ready.

        Raises:
            SpawnError, AgentStartupError: the very first start failed.
        """
        await self._lifetime.run_first(task_status)

    def _fail_turns(self, failure: BaseException) -> None:
        """End every turn still waiting on the agent (a turn that already ended ignores it)."""
        for session in self._sessions.all:
            turn = session.current_turn
            if turn is not None and not turn.is_done:
                turn.fail_now(failure)

    # -- called by the running generation (GenerationHost) -----------------------------------

    def client_capabilities(self) -> dict[str, Any]:
        return self._handlers.client_capabilities()

    def client_info(self) -> dict[str, Any]:
        return self._handlers.client_info()

    def serve(self, peer: JsonRpcPeer, generation: int) -> None:
        self._handlers.register(peer, generation)

    def generation_ready(self, number: int, connection: AgentConnection) -> None:
        """Generation ``number`` initialized and restored every session: the agent is ready."""
        self._connection = connection
        self._supervisor.ready(number)

    def generation_ending(self, number: int) -> None:
        """The process is going away: calls wait for the next one (the "needs restart" state)."""
        self._connection = None
        self._supervisor.ending(number)

    async def generation_exited(self, number: int, record: ExitRecord) -> None:
        """Decide, report, and fail the turns in flight, while the tree is still being reaped."""
        if self._restart_needed is not None and not self._restart_needed():
            self._supervisor.shutdown()  # nothing waits for another process: none is started
        await self._supervisor.exited(number, record)
        await self._handlers.end_generation(number)

    # -- shutdown -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        self._supervisor.shutdown()
        self._fail_turns(ResourceClosedError(f"{self.name} was closed during the turn"))
        self._events.close()
        await anyio.lowlevel.checkpoint()


@asynccontextmanager
async def open_supervised_agent(
    spec: AgentSpec, options: ClientOptions | None = None, *, started: Process | None = None
) -> AsyncIterator[SupervisedAgent]:
    """Start ``spec`` supervised; return once it answered ``initialize``.

    ``started`` is a process already spawned from ``spec`` (see :mod:`acp_bridge.process.early`):
    the first generation adopts it instead of spawning; restarts spawn as usual.

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
            agent._lifetime.adopted = started
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
