"""The optional resource watchdog: the resident memory of an agent's whole process tree.

The watchdog only measures and reports. :func:`watch_rss` runs in a task of the supervisor and
*returns* a :class:`WatchdogTrip` once the tree is over its limit; the supervisor then kills
the process group and goes through the ordinary restart path (the trip's ``reason`` is meant
for the exit record). It never kills anything itself, and it never returns for any other
reason: while the tree stays under the limit, or when the limit is None, it waits until it is
cancelled.

What RSS measures, and what it misses:

* Each sample walks the tree afresh, so a descendant spawned after one sample is counted from
  the next; one that lives and dies between two samples is never seen.
* A descendant whose parent exited is re-parented (to PID 1 or a subreaper) and leaves the
  tree, so it is no longer counted although it may still be in the agent's process group.
* RSS counts shared pages (libraries, copy-on-write memory after ``fork``) once per process,
  so a tree's sum overstates what the tree really costs. USS would be exact but costs ten
  times as much per process (dependencies.md, section 3).

RSS polling is what we have because it works for any agent; an ``RLIMIT_AS`` cap breaks
Node, Go and JVM agents, and cgroups are not available everywhere.
"""

from __future__ import annotations

import logging
import math
from typing import NoReturn

import anyio
import anyio.to_thread
import psutil

from acp_bridge.record import record

__all__ = ["WatchdogLimits", "WatchdogTrip", "tree_rss_bytes", "watch_rss"]

log = logging.getLogger(__name__)

_MIB = 1 << 20


@record
class WatchdogLimits:
    """What the watchdog enforces. ``max_tree_rss_bytes=None`` turns the RSS check off.

    ``interval_s`` is the pause between the end of one sample and the start of the next.

    Raises:
        ValueError: a limit that is not a positive int, or an interval that is not a positive,
            finite number of seconds.
    """

    max_tree_rss_bytes: int | None
    interval_s: float = 0.5

    def __post_init__(self) -> None:
        limit = self.max_tree_rss_bytes
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise ValueError(f"max_tree_rss_bytes must be an int or None, not {limit!r}")
        if limit is not None and limit <= 0:
            raise ValueError(f"max_tree_rss_bytes must be > 0, not {limit!r}")
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):
            raise ValueError(f"interval_s must be finite and > 0, not {self.interval_s!r}")


@record
class WatchdogTrip:
    """The tree was measured at ``rss_bytes``, over ``limit_bytes``; ``reason`` says so."""

    rss_bytes: int
    limit_bytes: int
    reason: str


def tree_rss_bytes(pid: int) -> int:
    """The RSS of ``pid`` plus all its descendants, as they are at this moment, in bytes.

    Zombies count for nothing, and processes that vanish while we look are skipped; a ``pid``
    that is gone (or a zombie) gives 0. The result is a snapshot: it misses descendants spawned
    after it, and those already re-parented away from the tree (see the module docstring).

    Cost: finding the descendants reads the parent of *every* process on the host (a scan of
    ``/proc``: ~2 ms with 74 processes, growing with the host's process count), then ~35 µs per
    tree member. It blocks, so async code should call it in a worker thread.

    Raises:
        PermissionError: we may not read ``pid``'s memory (it is not a process we started).
    """
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return 0
    return _tree_rss(root) or 0


def _tree_rss(root: psutil.Process) -> int | None:
    """The tree's RSS, or None when ``root`` is gone: exited, a zombie, or its pid reused."""
    try:
        # is_running() compares creation times, so a recycled pid reads as gone.
        if not root.is_running():
            return None
        with root.oneshot():
            if root.status() == psutil.STATUS_ZOMBIE:
                return None
            total = root.memory_info().rss
        descendants = root.children(recursive=True)
    except psutil.NoSuchProcess:  # ZombieProcess included
        return None
    except psutil.AccessDenied as exc:
        raise PermissionError(f"not allowed to read the memory of pid {root.pid}") from exc
    for proc in descendants:
        try:
            with proc.oneshot():
                if proc.status() != psutil.STATUS_ZOMBIE:
                    total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            # Vanished since the scan, or not ours to read (a setuid helper): skip it.
            continue
    return total


async def watch_rss(pid: int, limits: WatchdogLimits) -> WatchdogTrip:
    """Sample the tree RSS of ``pid`` every ``limits.interval_s``; return once it is over.

    Returns only on a trip. Run it in a task and cancel it when the agent stops; it kills
    nothing. The first sample is taken at once.

    When ``pid`` is gone (exited, a zombie, or its pid reused) the watchdog falls idle and waits
    to be cancelled: the supervisor learns of the exit through ``waitpid`` and owns what happens
    next, and sampling on could measure a stranger that inherited the pid. It also falls idle,
    with a warning, when it may not read the process's memory, rather than fail the supervisor.

    Sampling runs in a worker thread because the descendant scan reads all of ``/proc``
    (see :func:`tree_rss_bytes`); the thread is abandoned on cancel, as a sample has no effects.
    """
    limit = limits.max_tree_rss_bytes
    if limit is None:
        await _idle()
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        log.debug("watchdog: pid %d is already gone", pid)
        await _idle()
    while True:
        try:
            rss = await anyio.to_thread.run_sync(_tree_rss, root, abandon_on_cancel=True)
        except PermissionError as exc:
            log.warning("watchdog off for pid %d: %s", pid, exc)
            await _idle()
        if rss is None:
            log.debug("watchdog: pid %d is gone; idle until cancelled", pid)
            await _idle()
        if rss > limit:
            reason = f"watchdog: tree RSS {_mib(rss)} over the {_mib(limit)} limit"
            log.debug("pid %d: %s", pid, reason)
            return WatchdogTrip(rss_bytes=rss, limit_bytes=limit, reason=reason)
        await anyio.sleep(limits.interval_s)


async def _idle() -> NoReturn:
    await anyio.sleep_forever()
    raise AssertionError("sleep_forever() returned")


def _mib(n: int) -> str:
    return f"{n / _MIB:.4g} MiB"
