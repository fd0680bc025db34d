"""Signalling and inspecting an agent's process group and tree.

Agents start in their own session (``start_new_session=True``), so the agent's pid is also the
id of a process group holding everything it spawns, unless a descendant calls ``setsid`` itself.
We therefore act on two sets:

* the **group**, signalled with ``os.killpg`` (catches children spawned at any time);
* a **tree snapshot** taken with psutil while the agent is still alive (catches descendants that
  left the group; a snapshot misses what is spawned after it, the group does not).

Zombies are filtered out everywhere: in a container whose PID 1 does not reap, dead orphans
linger as zombies and are not "alive" in any sense that matters.

Signalling the group by the agent's pid (not ``os.getpgid``) is deliberate: after the leader is
reaped, ``getpgid`` fails, but the group id stays reserved while any member lives.
"""

from __future__ import annotations

import logging
import os
import signal

import psutil

__all__ = [
    "group_members",
    "is_alive",
    "living",
    "signal_group",
    "signal_processes",
    "tree_snapshot",
]

log = logging.getLogger(__name__)


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to every process in group ``pgid``. False when the group is empty."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # EPERM proves nothing either way (a member may run as another user): report, go on.
        log.warning("not permitted to signal process group %d with %s", pgid, sig.name)
        return False
    return True


def tree_snapshot(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants as they are now (empty if ``pid`` is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def group_members(pgid: int) -> list[psutil.Process]:
    """Living, non-zombie processes whose process group is ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return members


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie is dead: it only waits to be reaped).

    For our own child this is safe against pid reuse: its pid stays taken until we reap it.
    """
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def living(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running, zombies excluded.

    ``is_running`` also guards against pid reuse: psutil compares creation times.
    """
    alive = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return alive


def signal_processes(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in living(processes):
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
