"""Stopping a terminal's command and everything it spawned, with every wait bounded.

A command runs as the leader of its own process group (pid = group id). :func:`stop_command`:

1. SIGTERMs the process group and the descendants that left it (psutil snapshot);
2. waits up to ``term_grace_s`` for the command *and* those descendants to be gone;
3. if anything lives, SIGKILLs it all the same way and waits up to ``kill_wait_s``.

A command that exited but left descendants in its group gets the same steps, so no background
grandchild survives. The whole stop gives up (logged) after ``term_grace_s + kill_wait_s`` +
2 s, since its psutil scans run in worker threads that a process stuck in the kernel could
block; those threads are abandoned, never waited for.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Any, Final

import anyio
import psutil
from anyio.abc import Process

from acp_bridge.process import killer

__all__ = ["KILL_WAIT_S", "TERM_GRACE_S", "stop_command"]

log = logging.getLogger(__name__)

TERM_GRACE_S: Final = 2.0  # between SIGTERM and SIGKILL
KILL_WAIT_S: Final = 5.0  # for the kernel to finish off SIGKILLed processes, before giving up
_SURVIVOR_POLL_S: Final = 0.05  # descendants are not our children: no waitpid(), so poll
_SCAN_ALLOWANCE_S: Final = 2.0  # for the psutil scans in a stop, on top of its two waits


async def _in_thread(scan: Callable[..., list[psutil.Process]], *args: Any) -> list[Any]:
    """A psutil scan in a worker thread, abandoned on cancel (it only builds a fresh list)."""
    return await anyio.to_thread.run_sync(scan, *args, abandon_on_cancel=True)


def _survivors(pid: int, snapshot: list[psutil.Process]) -> list[psutil.Process]:
    """Living processes other than ``pid`` in its group or in ``snapshot``. Blocking."""
    found = {p.pid: p for p in killer.living(snapshot)}
    for proc in killer.group_members(pid):
        found.setdefault(proc.pid, proc)
    found.pop(pid, None)
    return list(found.values())


async def stop_command(
    process: Process, terminal_id: str, *, term_grace_s: float, kill_wait_s: float
) -> None:
    """SIGTERM, bounded wait, SIGKILL what is left (module docstring). Call shielded.

    Bounded as a whole, too: the psutil scans run in worker threads, abandoned if a scan
    itself hangs (a /proc read can, behind a process stuck in the kernel). ``terminal_id``
    only names the command in log messages.
    """
    bound = term_grace_s + kill_wait_s + _SCAN_ALLOWANCE_S
    with anyio.move_on_after(bound) as scope:
        await _signal_until_gone(process, terminal_id, term_grace_s, kill_wait_s)
    if scope.cancelled_caught:
        log.error("terminal %s (pid %d): not stopped within %.1fs", terminal_id, process.pid, bound)


async def _signal_until_gone(
    process: Process, terminal_id: str, term_grace_s: float, kill_wait_s: float
) -> None:
    pid = process.pid
    snapshot = []
    if process.returncode is None:
        snapshot = await _in_thread(killer.tree_snapshot, pid)
    steps = ((signal.SIGTERM, term_grace_s), (signal.SIGKILL, kill_wait_s))
    for sig, grace in steps:
        survivors = await _in_thread(_survivors, pid, snapshot)
        if process.returncode is not None and not survivors:
            return
        log.debug("terminal %s: sending %s", terminal_id, sig.name)
        killer.signal_group(pid, sig)
        killer.signal_processes(survivors, sig)
        with anyio.move_on_after(grace):
            await process.wait()
            while await _in_thread(_survivors, pid, snapshot):  # noqa: ASYNC110
                await anyio.sleep(_SURVIVOR_POLL_S)
    left = await _in_thread(_survivors, pid, snapshot)
    if process.returncode is None or left:
        log.error("terminal %s (pid %d): processes survived SIGKILL", terminal_id, pid)
