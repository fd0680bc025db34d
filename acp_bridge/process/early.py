"""Spawn the agent before the bridge has finished importing itself, then adopt it.

A one-shot ``acp-bridge run -m hello`` used to import the whole library (wire models,
conversation layer: several hundred milliseconds) before the agent was even spawned, and only
then wait for the agent's own start-up (an interpreter, or ``npx`` resolving a package). Both
are fixed costs of every run, and they need not be paid one after the other.

:func:`spawn_early` starts the command with :class:`subprocess.Popen` (own session, three pipes),
needing nothing but the standard library and :class:`~acp_bridge.process.spec.AgentSpec`.
:class:`AdoptedProcess` then presents that process as an :class:`anyio.abc.Process`, so
:func:`~acp_bridge.process.launcher.open_agent` supervises it exactly like one it spawned: its
pipes are read and written through the cancel-safe fd streams, and its exit is awaited on a
pidfd (Linux), else in a worker thread.

Whoever calls :func:`spawn_early` owns the process until it is handed over: on any failure
before that, :func:`discard` kills its process group and reaps it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from acp_bridge.process.parent_death import dying_with_parent
from acp_bridge.process.spec import AgentSpec
from acp_bridge.process.start_args import PIPED_SESSION, start_failure
from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream

__all__ = ["AdoptedProcess", "discard", "spawn_early"]


def spawn_early(
    spec: AgentSpec, base_env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``spec`` now, as :func:`open_agent` would (own session, pipes, its cwd and env).

    Raises:
        SpawnError: the command could not be started (``__cause__`` holds the OSError).
    """
    env = None
    if spec.changes_env:
        env = spec.resolve_env(base_env if base_env is not None else os.environ)
    try:
        return subprocess.Popen(
            dying_with_parent(spec.argv, cwd=spec.cwd, env=env),
            cwd=spec.cwd,
            env=env,
            **PIPED_SESSION,
        )
    except OSError as exc:
        raise start_failure(spec, exc) from exc


def discard(popen: subprocess.Popen[bytes]) -> None:
    """Kill a process spawned early that will never be adopted (its whole group), and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=5)


class AdoptedProcess(Process):
    """A :class:`subprocess.Popen` seen through anyio's process interface. Takes ownership of
    its pipes (closed by :meth:`aclose`)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        self._popen = popen
        # The fd streams own duplicates; the Popen's file objects are closed now, so each fd
        # has exactly one owner.
        self._stdin = FdSendStream(_take_fd(popen.stdin), close_fd=True)
        self._stdout = FdReceiveStream(_take_fd(popen.stdout), close_fd=True)
        self._stderr = FdReceiveStream(_take_fd(popen.stderr), close_fd=True)
        popen.stdin = popen.stdout = popen.stderr = None

    async def wait(self) -> int:
        if self._popen.returncode is None:
            await _wait_exited(self._popen)
        return self._popen.wait()

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        if self._popen.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(sig)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    @property
    def stdin(self) -> ByteSendStream:
        return self._stdin

    @property
    def stdout(self) -> ByteReceiveStream:
        return self._stdout

    @property
    def stderr(self) -> ByteReceiveStream:
        return self._stderr

    def discard_if_running(self) -> None:
        """Kill the process group and reap it, unless it has already been reaped (by the
        launcher that adopted it): for an interruption before anyone supervised it."""
        if self._popen.returncode is None:
            discard(self._popen)

    async def aclose(self) -> None:
        for stream in (self._stdin, self._stdout, self._stderr):
            await stream.aclose()
        await self.wait()


def _take_fd(file: object) -> int:
    fd = os.dup(file.fileno())  # type: ignore[attr-defined]
    file.close()  # type: ignore[attr-defined]
    return fd


async def _wait_exited(popen: subprocess.Popen[bytes]) -> None:
    """Until the process has exited (not reaped: ``popen.wait()`` does that)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            pidfd = pidfd_open(popen.pid)
        except OSError:  # already reaped, or a kernel without pidfds
            pidfd = None
        if pidfd is not None:
            try:
                await anyio.wait_readable(pidfd)
            finally:
                os.close(pidfd)
            return
    await anyio.to_thread.run_sync(popen.wait, abandon_on_cancel=True)
