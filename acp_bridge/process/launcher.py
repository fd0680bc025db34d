"""Start an agent process, watch it, and stop it so that nothing it started survives.

Shutdown sequence (:meth:`AgentProcess.aclose`, also run when :func:`open_agent` exits for any
reason: normal exit, an exception, or cancellation), shielded, with every wait bounded:

1. take a psutil snapshot of the agent's tree (descendants that left the process group);
2. close the agent's stdin: a well-behaved ACP agent exits on EOF;
3. wait up to ``STDIN_CLOSE_GRACE_S`` for the agent to exit;
4. SIGTERM the process group, wait up to ``TERM_GRACE_S``;
5. SIGKILL the process group, wait up to ``KILL_WAIT_S``;
6. whatever is still alive in the group or the snapshot (children outliving a leader that
   exited) gets SIGTERM, then SIGKILL, with the same bounds;
7. close the pipes.

The bounds are a :class:`ShutdownTimeouts`, given at the start and changeable until the stop
begins (:attr:`AgentProcess.shutdown`). Two sets are named here: the default one, which gives a
well-behaved agent time to finish what it does on EOF, and :data:`SETTLED_SHUTDOWN`, for an
agent nothing more will be asked of (a one-shot ``acp-bridge run`` whose messages all ended and
were recorded): its own teardown is not waited for beyond a short window, and the whole tree is
gone within about ``SETTLED_STDIN_CLOSE_GRACE_S + SETTLED_TERM_GRACE_S`` (0.5 s) plus the
kernel's reaping. It is the same sequence with shorter first waits, not another one.

:meth:`AgentProcess.kill_now` is the "stop now" path (a second Ctrl-C): it SIGKILLs the group and
every descendant known so far at once, synchronously, and makes a graceful stop that is running
or comes later skip straight to waiting (bounded) for the kernel to reap the tree.

Nothing is reported as surviving a signal unless it really is alive afterwards: a wait that
ran out is checked against the process table (a zombie is dead, it just was not reaped yet).

The exit is noticed through ``Process.wait()`` (waitpid), never through EOF on stdout: a
grandchild that inherited stdout keeps the pipe open long after the agent died.

stderr is always drained (an agent blocked on a full stderr pipe would hang); its last lines are
kept for error messages and can be forwarded, line by line, to a callback.

Starting the process (own session, dying with us, pipe-sized reads) is
:mod:`acp_bridge.process.spawn`; ``PIPE_READ_BYTES`` and ``read_in_pipe_sized_chunks`` are
re-exported here, so the old import paths keep working.
"""

from __future__ import annotations

import logging
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Final

import anyio
import psutil
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from acp_bridge.process import killer
from acp_bridge.process.spawn import PIPE_READ_BYTES, read_in_pipe_sized_chunks, spawn_agent
from acp_bridge.process.spec import AgentSpec
from acp_bridge.record import record

__all__ = [
    "KILL_WAIT_S",
    "PIPE_READ_BYTES",
    "SETTLED_SHUTDOWN",
    "SETTLED_STDIN_CLOSE_GRACE_S",
    "SETTLED_TERM_GRACE_S",
    "STDIN_CLOSE_GRACE_S",
    "TERM_GRACE_S",
    "AgentProcess",
    "ExitStatus",
    "ShutdownTimeouts",
    "open_agent",
    "read_in_pipe_sized_chunks",
]

log = logging.getLogger(__name__)

STDIN_CLOSE_GRACE_S: Final = 2.0
"""How long an agent gets to exit by itself once its stdin is closed."""
TERM_GRACE_S: Final = 2.0
"""How long the group gets between SIGTERM and SIGKILL."""
KILL_WAIT_S: Final = 5.0
"""How long we wait for the kernel to finish off a SIGKILLed agent before giving up on it."""
_LEFTOVER_POLL_S: Final = 0.05
"""Poll interval while waiting for leftover descendants, which we cannot waitpid() on."""

STDERR_TAIL_LINES: Final = 200
_STDERR_LINE_MAX_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)  # a default argument below: ruff sees it as immutable
class ShutdownTimeouts:
    """The bounds of each shutdown step, in seconds (see the module docstring)."""

    stdin_close_grace_s: float = STDIN_CLOSE_GRACE_S
    term_grace_s: float = TERM_GRACE_S
    kill_wait_s: float = KILL_WAIT_S


SETTLED_STDIN_CLOSE_GRACE_S: Final = 0.2
"""How long an agent nothing more is asked of gets to exit by itself once its stdin is closed."""
SETTLED_TERM_GRACE_S: Final = 0.3
"""And between SIGTERM and SIGKILL."""
SETTLED_SHUTDOWN: Final = ShutdownTimeouts(
    stdin_close_grace_s=SETTLED_STDIN_CLOSE_GRACE_S, term_grace_s=SETTLED_TERM_GRACE_S
)
"""The stop of an agent whose work is settled (see the module docstring): the user's answer
is complete and recorded, so the agent's own teardown (saving state, closing a runtime) is not
waited for beyond a short window."""


@record
class ExitStatus:
    """How a process ended: ``returncode`` as Python reports it, ``signal`` when killed by one."""

    returncode: int

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None

    def describe(self) -> str:
        if self.signal is not None:
            try:
                return f"killed by {signal.Signals(self.signal).name}"
            except ValueError:
                return f"killed by signal {self.signal}"
        return f"exited with code {self.returncode}"


class _StderrTail:
    """The last lines of an agent's stderr, each cut at a byte limit."""

    def __init__(self, max_lines: int) -> None:
        self.lines: deque[str] = deque(maxlen=max_lines)
        self._partial = bytearray()
        self.total_bytes = 0

    def feed(self, chunk: bytes) -> list[str]:
        self.total_bytes += len(chunk)
        complete = []
        *whole, rest = chunk.split(b"\n")
        for piece in whole:
            self._partial += piece[: max(0, _STDERR_LINE_MAX_BYTES - len(self._partial))]
            complete.append(self._take())
        self._partial += rest[: max(0, _STDERR_LINE_MAX_BYTES - len(self._partial))]
        return complete

    def finish(self) -> list[str]:
        return [self._take()] if self._partial else []

    def _take(self) -> str:
        line = self._partial.decode("utf-8", errors="replace").rstrip("\r")
        self._partial.clear()
        self.lines.append(line)
        return line


class AgentProcess:
    """A running agent: its pipes, its exit status, the tail of its stderr."""

    def __init__(
        self,
        spec: AgentSpec,
        process: Process,
        stderr_forward: Callable[[str], None] | None,
        stderr_tail_lines: int,
        shutdown: ShutdownTimeouts,
    ) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.spec = spec
        self.pid = process.pid
        self.stdin: ByteSendStream = process.stdin
        self.stdout: ByteReceiveStream = process.stdout
        self._process = process
        self._stderr_forward = stderr_forward
        self._stderr = _StderrTail(stderr_tail_lines)
        self._exited = anyio.Event()
        self._exit_status: ExitStatus | None = None
        self.shutdown = shutdown
        """The bounds of the stop's steps; a new value applies if the stop has not begun."""
        self._closed = False
        # Set by kill_now: every wait of the graceful stop ends at once (it has nothing to wait
        # for any more but the reaping).
        self._killed = anyio.Event()
        self._known: list[psutil.Process] = []
        # The exit watcher and the stderr pump must outlive a cancelled caller: shutdown needs
        # both (to see the exit, and so an agent blocked on stderr can exit). They run shielded
        # and are stopped explicitly through this scope once shutdown is over.
        self._background = anyio.CancelScope(shield=True)

    def __repr__(self) -> str:
        state = self._exit_status.describe() if self._exit_status else "running"
        return f"<AgentProcess {self.spec.name!r} pid={self.pid} [{state}]>"

    @property
    def exit_status(self) -> ExitStatus | None:
        """None while the agent runs."""
        return self._exit_status

    @property
    def has_exited(self) -> bool:
        return self._exit_status is not None

    async def wait_exited(self) -> ExitStatus:
        await self._exited.wait()
        assert self._exit_status is not None
        return self._exit_status

    def stderr_tail(self, max_lines: int = 20) -> str:
        """The last ``max_lines`` lines the agent wrote to stderr."""
        lines = list(self._stderr.lines)[-max_lines:] if max_lines > 0 else []
        return "\n".join(lines)

    @property
    def stderr_bytes(self) -> int:
        """How many bytes of stderr were drained so far."""
        return self._stderr.total_bytes

    async def _run_background(self) -> None:
        with self._background:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_exit)
                tg.start_soon(self._pump_stderr)

    async def _watch_exit(self) -> None:
        returncode = await self._process.wait()
        self._exit_status = ExitStatus(returncode)
        log.debug("%s (pid %d) %s", self.spec.name, self.pid, self._exit_status.describe())
        self._exited.set()

    async def _pump_stderr(self) -> None:
        stream = self._process.stderr
        assert stream is not None
        try:
            async for chunk in stream:
                for line in self._stderr.feed(chunk):
                    self._forward(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        for line in self._stderr.finish():
            self._forward(line)

    def _forward(self, line: str) -> None:
        if self._stderr_forward is not None:
            self._stderr_forward(line)

    @property
    def was_killed(self) -> bool:
        """:meth:`kill_now` was called."""
        return self._killed.is_set()

    def kill_now(self) -> None:
        """SIGKILL the agent's process group and every descendant known so far, now.

        Synchronous (a psutil snapshot and a few ``kill`` calls; it never waits) and idempotent:
        a second call signals again whatever is still there, which is harmless. A graceful
        stop in progress (:meth:`aclose`) or a later one skips its EOF and SIGTERM steps and
        only waits, bounded by ``kill_wait_s``, for the tree to be reaped.
        """
        if not self.has_exited:
            self._known.extend(killer.tree_snapshot(self.pid))
        log.info("%s (pid %d): killing its process tree now", self.spec.name, self.pid)
        killer.signal_group(self.pid, signal.SIGKILL)
        killer.signal_processes(self._known, signal.SIGKILL)
        self._killed.set()

    async def aclose(self) -> None:
        """Stop the agent and everything it started (see the module docstring). Idempotent."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._stop()

    async def _stop(self) -> None:
        snapshot = [*self._known, *([] if self.has_exited else killer.tree_snapshot(self.pid))]
        bounds = self.shutdown
        try:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                with anyio.move_on_after(bounds.stdin_close_grace_s):
                    await self.stdin.aclose()
            await self._escalate(bounds)
            await self._stop_leftovers(snapshot)
        finally:
            # Bounded: a grandchild holding stdout or stderr open must not keep us here.
            with anyio.move_on_after(bounds.kill_wait_s):
                await self._process.aclose()

    async def _escalate(self, bounds: ShutdownTimeouts) -> None:
        """EOF, then SIGTERM, then SIGKILL to the group, each with its bounded wait; after
        :meth:`kill_now` straight to the last wait."""
        if await self._exits_within(bounds.stdin_close_grace_s):
            return
        if not self.was_killed:
            log.info("%s did not exit on EOF; sending SIGTERM", self.spec.name)
            killer.signal_group(self.pid, signal.SIGTERM)
            if await self._exits_within(bounds.term_grace_s):
                return
        if not self.was_killed:
            log.warning("%s ignored SIGTERM; sending SIGKILL", self.spec.name)
        killer.signal_group(self.pid, signal.SIGKILL)
        if not await self._exits_within(bounds.kill_wait_s, killed=True):
            log.error("%s (pid %d) survived SIGKILL", self.spec.name, self.pid)

    async def _exits_within(self, seconds: float, *, killed: bool = False) -> bool:
        """Whether the agent is dead within ``seconds``; after :meth:`kill_now` the wait ends
        early unless this already is the wait after SIGKILL (``killed``)."""
        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as tg:

                async def exited() -> None:
                    await self._exited.wait()
                    tg.cancel_scope.cancel()

                async def hurried() -> None:
                    await self._killed.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(exited)
                if not killed:
                    tg.start_soon(hurried)
        # The watcher may not have run yet (or at all): the process table has the last word.
        return self._exited.is_set() or not killer.is_alive(self.pid)

    async def _stop_leftovers(self, snapshot: list[psutil.Process]) -> None:
        """Descendants that outlived the agent: in its group, or in the snapshot."""
        bounds = self.shutdown
        steps = ((signal.SIGTERM, bounds.term_grace_s), (signal.SIGKILL, bounds.kill_wait_s))
        for sig, grace in steps:
            leftovers = self._leftovers(snapshot)
            if not leftovers:
                return
            log.info(
                "%s left %d process(es) behind; sending %s",
                self.spec.name,
                len(leftovers),
                sig.name,
            )
            killer.signal_group(self.pid, sig)
            killer.signal_processes(leftovers, sig)
            with anyio.move_on_after(grace):
                # Not our children: nothing to waitpid() on, so poll.
                while self._leftovers(snapshot):  # noqa: ASYNC110
                    await anyio.sleep(_LEFTOVER_POLL_S)
        if leftovers := self._leftovers(snapshot):  # checked after the wait: really alive
            log.error("%s: %d process(es) survived SIGKILL", self.spec.name, len(leftovers))

    def _leftovers(self, snapshot: list[psutil.Process]) -> list[psutil.Process]:
        own_pid = self.pid
        found = {p.pid: p for p in killer.living(snapshot) if p.pid != own_pid}
        for proc in killer.group_members(self.pid):
            found.setdefault(proc.pid, proc)
        return list(found.values())


@asynccontextmanager
async def open_agent(
    spec: AgentSpec,
    *,
    base_env: Mapping[str, str] | None = None,
    stderr_forward: Callable[[str], None] | None = None,
    stderr_tail_lines: int = STDERR_TAIL_LINES,
    shutdown: ShutdownTimeouts = ShutdownTimeouts(),
    process: Process | None = None,
) -> AsyncIterator[AgentProcess]:
    """Start ``spec`` in its own process group; stop it and its whole tree on exit.

    ``process``, when given, was already started from ``spec`` (see
    :mod:`acp_bridge.process.early`) and is adopted instead of spawning a new one.

    ``base_env`` is the environment the spec's changes apply to; without it the agent inherits
    ours unchanged (and a spec that changes the environment is an error: pass ``os.environ``).

    Raises:
        SpawnError: the command could not be started (``__cause__`` holds the OSError).
    """
    if process is None:
        process = await spawn_agent(spec, base_env)
    agent = AgentProcess(spec, process, stderr_forward, stderr_tail_lines, shutdown)
    log.debug("started %s (pid %d): %s", spec.name, agent.pid, spec.display_command)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent._run_background)
            try:
                yield agent
            finally:
                try:
                    await agent.aclose()
                finally:
                    # Always, even if the stop failed: the watcher and the pump are shielded
                    # and would otherwise keep this task group (and our caller) waiting.
                    agent._background.cancel()
    except BaseExceptionGroup as group:
        # The caller's own exception, raised in the body, comes back wrapped by the task group;
        # hand it back unwrapped when it is alone.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise
