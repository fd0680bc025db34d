"""Start an agent process for :func:`~acp_bridge.process.launcher.open_agent`.

The agent gets its own session (so its whole group can be signalled), dies with us (see
:mod:`acp_bridge.process.parent_death`), and three pipes; on asyncio the pipes then read in
pipe-sized chunks (see :data:`PIPE_READ_BYTES`). Watching and stopping the process is the
launcher's job, not this module's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Final

import anyio
from anyio.abc import Process

from acp_bridge.process.parent_death import dying_with_parent
from acp_bridge.process.spec import AgentSpec
from acp_bridge.process.start_args import PIPED_SESSION, start_failure

__all__ = ["PIPE_READ_BYTES", "read_in_pipe_sized_chunks", "spawn_agent"]


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def spawn_agent(spec: AgentSpec, base_env: Mapping[str, str] | None) -> Process:
    """Start ``spec`` in a new session with three pipes (see the module docstring).

    Raises:
        SpawnError: the command could not be started (``__cause__`` holds the OSError).
        ValueError: ``spec`` changes the environment and ``base_env`` is None.
    """
    env = None
    if spec.changes_env:
        if base_env is None:
            raise ValueError("a spec that changes the environment needs base_env")
        env = spec.resolve_env(base_env)
    argv = dying_with_parent(
        spec.argv,
        cwd=spec.cwd,
        env=env,
        # asyncio forks in this (the loop's) thread; trio in a short-lived worker
        forked_by_this_thread=_on_asyncio(),
    )
    await anyio.lowlevel.checkpoint_if_cancelled()  # a caller cancelled already starts nothing
    try:
        # Shielded: a spawn, once begun, completes (it is a fork and an exec), and the caller
        # stops the process like any other. On asyncio a spawn cancelled half-way kills the
        # new process alone (not its group) and is cancelled again while waiting for it, so
        # nothing of ours reaps it: asyncio's child watcher then finds it exited after the loop
        # closed ("Loop ... that handles pid ... is closed", at the end of a run whose agent
        # was being restarted as it stopped).
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(argv, cwd=spec.cwd, env=env, **PIPED_SESSION)
    except OSError as exc:
        raise start_failure(spec, exc) from exc
    read_in_pipe_sized_chunks(process)
    return process


PIPE_READ_BYTES: Final = 64 * 1024
"""What one read of an agent's stdout or stderr asks for on asyncio: a pipe's default capacity.

asyncio's pipe transport asks ``os.read`` for 256 KiB each time, although a pipe never holds
more than its capacity (64 KiB by default). A 256 KiB buffer is above glibc's mmap threshold,
so every read maps fresh pages and faults them in: measured here, a read of 43 KB took 61 µs
asking 256 KiB and 17 µs asking 64 KiB. During a flood of updates that is most of the relay's
read cost. trio already reads what the caller asks for."""


def read_in_pipe_sized_chunks(process: Process) -> None:
    """On asyncio, make the pipe transports of ``process`` read :data:`PIPE_READ_BYTES` at a
    time (see there). A no-op on trio, or if asyncio's transport lacks the attribute."""
    transport = getattr(process, "_transport", None)
    if not isinstance(transport, asyncio.SubprocessTransport):
        return
    for fd in (1, 2):
        pipe = transport.get_pipe_transport(fd)
        if pipe is not None and hasattr(pipe, "max_size"):
            pipe.max_size = PIPE_READ_BYTES
