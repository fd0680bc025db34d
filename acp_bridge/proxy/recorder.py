"""``--record FILE``: every message the proxy sees, with time and direction, as NDJSON.

One line per message (the format is :mod:`.recording`'s), in the order the proxy handled them:
``editor->bridge``, ``bridge->agent``, ``agent->bridge``, ``bridge->editor``, and the bridge's
own lifecycle (an agent exit, a restart) as ``"dir": "bridge"`` with an ``"event"`` object.

A recording is a debugging aid, never a risk to the session:

* **Whole lines only.** Lines are gathered in a buffer of whole lines and handed to the OS with
  ``os.write`` (a short write is continued). When a write fails (ENOSPC, EIO, EFBIG under
  ``ulimit -f``, ...), the file is cut back to its last whole line, and the recording stops.
* **A cap.** The file never grows past ``max_bytes`` (``--record-max-bytes``, default
  :data:`DEFAULT_MAX_BYTES`). It counts the whole file, what earlier runs appended included,
  so a recording configured in an editor cannot fill a disk over many sessions either.
* **Stopping** is one log line, and, where the file has room, a last line
  ``{"dir": "bridge", "event": {"event": "recording_stopped", "reason": "max_bytes" |
  "write_failed", "detail": ...}}``. The relay goes on as if there were no recording.

The file is opened for appending, created 0600 (it holds prompts); anything but a regular file
(a FIFO, a device such as ``/dev/full``) is refused, without blocking on a FIFO's open. A file
that ends in a cut line (an older recorder, a crash mid-write) is first cut back to its last
whole line, so what is appended starts a line of its own. One proxy per file: the offsets kept
here assume no other writer.

The proxy calls :meth:`flush` every :data:`FLUSH_EVERY_S` and when it stops, and the buffer is
written whenever it holds :data:`BUFFER_BYTES`, so a proxy killed outright (``kill -9``) loses
at most that last fraction of a second, and the buffer is bounded.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time

from acp_bridge.errors import UnsafeFileError
from acp_bridge.proxy.recording import (
    DEFAULT_MAX_BYTES,
    entry_line,
    event_line,
    raw_line,
    stopped_line,
)
from acp_bridge.safe_files import open_regular

__all__ = ["BUFFER_BYTES", "DEFAULT_MAX_BYTES", "FLUSH_EVERY_S", "MIN_MAX_BYTES", "Recorder"]

log = logging.getLogger(__name__)

FLUSH_EVERY_S = 0.2
BUFFER_BYTES = 256 * 1024

_STOP_ROOM = 512
"""Room kept under the cap for the ``recording_stopped`` line (it takes about 200 bytes)."""

MIN_MAX_BYTES = 4096
"""The smallest ``--record-max-bytes`` accepted: a cap below it would record nothing."""

_SCAN_BYTES = 64 * 1024


class Recorder:
    def __init__(
        self,
        path: str,
        *,
        redact_secrets: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
        follow_links: bool = True,
    ) -> None:
        """Open ``path`` for appending; ``follow_links=False``: never through a symbolic link
        (``O_NOFOLLOW``; ``run --record``).

        Raises:
            OSError: it cannot be opened, or it is not a regular file (``EINVAL``), or it is a
                symbolic link and ``follow_links`` is false (``ELOOP``).
        """
        self._path = path
        self._redact = redact_secrets
        self._max_bytes = max_bytes
        self._buffer = bytearray()
        self._fd: int | None = _open_regular(path, 0 if follow_links else os.O_NOFOLLOW)
        try:
            self._size = os.fstat(self._fd).st_size  # bytes in the file, all in whole lines
            if self._size + _STOP_ROOM > max_bytes:
                held = f"the file already holds {self._size} bytes (--record-max-bytes {max_bytes})"
                self._stop("max_bytes", held, note=False)
            else:
                self._cut_to_whole_lines()
        except OSError:
            self.close()
            raise

    @property
    def is_recording(self) -> bool:
        return self._fd is not None

    def message(self, direction: str, line: bytes, *, valid: bool = True) -> None:
        """Record one line that crossed a pipe. ``valid=False``: the caller found it is not
        JSON, and it goes under ``raw`` at once; otherwise the line is checked here (the
        relay reads a ``session/update`` by its prefix alone)."""
        if self._fd is None:
            return
        t = time.time()
        if valid:
            self._append(entry_line(t, direction, line, redact_secrets=self._redact))
        else:
            self._append(raw_line(t, direction, line, redact_secrets=self._redact))

    def event(self, event: dict[str, object]) -> None:
        if self._fd is not None:
            self._append(event_line(time.time(), event))

    def flush(self) -> None:
        """Hand the buffered lines to the OS (a no-op when there are none)."""
        if self._fd is None or not self._buffer:
            return
        failure = self._write(self._buffer)
        self._buffer.clear()
        if failure is not None:
            self._stop("write_failed", _describe(failure))

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError as exc:  # NFS and the like report a failed write only here
                log.error("recording to %s: closing it failed: %s", self._path, _describe(exc))

    # -- the file ----------------------------------------------------------------------------

    def _append(self, line: bytes) -> None:
        if self._size + len(self._buffer) + len(line) + _STOP_ROOM > self._max_bytes:
            self.flush()
            self._stop("max_bytes", f"the file reached --record-max-bytes ({self._max_bytes})")
            return
        self._buffer += line
        if len(self._buffer) >= BUFFER_BYTES:
            self.flush()

    def _write(self, data: bytes | bytearray) -> OSError | None:
        """Write ``data`` (whole lines) at the end of the file; on a failure, cut the file back
        to the last whole line that made it, and return the error."""
        written = 0
        with memoryview(data) as view:
            try:
                assert self._fd is not None
                while written < len(view):
                    count = os.write(self._fd, view[written:])
                    if count == 0:  # pragma: no cover - regular files write or fail
                        raise OSError(errno.EIO, "the write made no progress")
                    written += count
            except OSError as exc:
                kept = data.rfind(b"\n", 0, written) + 1
                self._size += kept
                if kept != written:
                    self._truncate()
                return exc
        self._size += written
        return None

    def _truncate(self) -> None:
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as exc:
            log.error("recording to %s: cutting a partial line failed: %s", self._path, exc)

    def _cut_to_whole_lines(self) -> None:
        """Cut a partial last line (no newline) left by a writer that died mid-line."""
        assert self._fd is not None
        end = self._size
        while end > 0:
            start = max(0, end - _SCAN_BYTES)
            newline = os.pread(self._fd, end - start, start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        if end != self._size:
            log.warning(
                "recording to %s: its last %d bytes were a cut line; dropped",
                self._path,
                self._size - end,
            )
            self._size = end
            self._truncate()

    def _stop(self, reason: str, detail: str, *, note: bool = True) -> None:
        """Stop recording: a last line saying why (where the file has room), one log line."""
        if self._fd is None:
            return
        self._buffer.clear()
        line = stopped_line(time.time(), reason, detail)
        if note and self._size + len(line) <= self._max_bytes:
            self._write(line)  # best effort: on a full disk it fails too, and leaves nothing
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):  # stopped either way; its one log line follows
            os.close(fd)
        log.error("recording to %s stopped (%s); the proxy goes on without it", self._path, detail)


def _open_regular(path: str, more_flags: int) -> int:
    """The recording's descriptor: a regular file only (never blocking on a FIFO), created 0600
    (see :func:`acp_bridge.safe_files.open_regular`)."""
    try:
        return open_regular(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | more_flags)
    except UnsafeFileError as exc:
        raise OSError(errno.EINVAL, exc.reason) from exc


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc)
    return f"{name}: {reason}" if name else reason
