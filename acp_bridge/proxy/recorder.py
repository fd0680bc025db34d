"""``--record FILE``: every message the proxy sees, with time and direction, as NDJSON.

One line per message: ``{"t": <unix time>, "dir": <direction>, "msg": <the message>}``, the
directions being ``editor->bridge``, ``bridge->agent``, ``agent->bridge`` and
``bridge->editor``, in the order the proxy handled them. ``msg`` is the line exactly as it
crossed the pipe (byte-equal JSON), unless ``redact`` is on, when it is the parsed message
with secrets masked (:mod:`.redact`). A line that is not valid JSON is kept as a string under
``"raw"``. The bridge's own lifecycle (an agent exit, a restart) is recorded with
``"dir": "bridge"`` and an ``"event"`` object.

The file is opened for appending, created 0600 (it holds prompts). Writes go through one
buffered file object (a 1 MiB buffer: at the bound, a write reaches the disk). The proxy
calls :meth:`flush` every :data:`FLUSH_EVERY_S` and when it stops, so a proxy killed outright
(``kill -9``) loses at most that last fraction of a second, never the recording.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, BinaryIO

from acp_bridge.proxy.redact import redact, redact_text

__all__ = ["DIRECTIONS", "FLUSH_EVERY_S", "Recorder"]

FLUSH_EVERY_S = 0.2

DIRECTIONS = ("editor->bridge", "bridge->agent", "agent->bridge", "bridge->editor")
_BUFFER_BYTES = 1024 * 1024


class Recorder:
    def __init__(self, path: str, *, redact_secrets: bool = False) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file: BinaryIO = os.fdopen(fd, "ab", buffering=_BUFFER_BYTES)
        self._redact = redact_secrets
        self._dirs = {d: b',"dir":"' + d.encode() + b'","msg":' for d in DIRECTIONS}

    def message(self, direction: str, line: bytes, *, valid: bool) -> None:
        stamp = repr(time.time()).encode()
        if valid and not self._redact:
            self._file.write(b"".join((b'{"t":', stamp, self._dirs[direction], line, b"}\n")))
            return
        entry: dict[str, Any] = {"t": float(stamp), "dir": direction}
        try:
            parsed = json.loads(line) if valid else None
        except (ValueError, RecursionError):
            valid = False
        if valid:
            entry["msg"] = redact(parsed) if self._redact else parsed
        else:
            text = line.decode("utf-8", errors="replace")
            entry["raw"] = redact_text(text) if self._redact else text
        self._write(entry)

    def event(self, event: dict[str, Any]) -> None:
        self._write({"t": time.time(), "dir": "bridge", "event": event})

    def _write(self, entry: dict[str, Any]) -> None:
        text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False)
        self._file.write(text.encode("utf-8") + b"\n")

    def flush(self) -> None:
        """Hand what is buffered to the OS (a no-op when nothing is)."""
        with contextlib.suppress(OSError):
            self._file.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
