"""Where a flood stands, read from ``/proc`` (Linux): how full a process's pipe is, whether a
process is asleep, and its resident memory now and at its peak.

A flood through the proxy is *stuck at its bound* when the side that stopped reading has a full
pipe, the proxy's pipe to the other side is full too (the proxy stopped reading it), and the
proxy sleeps (nothing left to do until a side reads). Tests and benchmarks wait for that
condition, polling it, instead of sleeping for a guessed time; then they read the proxy's RSS
and its peak (``VmHWM``), which covers every moment of the flood before.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import termios
from pathlib import Path

__all__ = ["is_asleep", "peak_rss_bytes", "pipe_fill", "pipe_is_full", "rss_bytes"]

_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
_PAGE = 4096


def pipe_fill(pid: int, fd: int) -> tuple[int, int] | None:
    """The bytes waiting in the pipe that ``pid`` holds as ``fd``, and the pipe's capacity;
    None when that is not a pipe (or the process is gone).

    The pipe is opened through ``/proc`` for reading, without reading: that adds a reader for
    a moment, nothing else."""
    try:
        probe = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        waiting = array.array("i", [0])
        fcntl.ioctl(probe, termios.FIONREAD, waiting)
        return waiting[0], fcntl.fcntl(probe, _F_GETPIPE_SZ)
    except OSError:
        return None
    finally:
        os.close(probe)


def pipe_is_full(pid: int, fd: int) -> bool:
    """Whether that pipe has no room for another page: its writer blocks."""
    fill = pipe_fill(pid, fd)
    return fill is not None and fill[0] >= fill[1] - _PAGE


def is_asleep(pid: int) -> bool:
    """Whether the process's main thread sleeps (waits for an event), not runs."""
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] == "S"
    return False


def rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    """The most resident memory the process has had (``VmHWM``)."""
    return _status_kib(pid, "VmHWM") * 1024


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(f"no {field} in /proc/{pid}/status")
