"""``run --record FILE``: the JSON-RPC traffic between the bridge and the agent, as NDJSON.

The proxy's recorder and format (:mod:`acp_bridge.proxy.recorder`, :mod:`.recording` there)
unchanged: one line per message, ``{"t": ..., "dir": "bridge->agent" | "agent->bridge", "msg":
...}``, so ``acp-bridge replay FILE`` serves a run's recording as an agent, as it does a proxy's.
The same hardening: a regular file only (a FIFO is refused without blocking), opened with
``O_NOFOLLOW``, created 0600 (it holds prompts), appended to; a failed write or the size cap
(:data:`~acp_bridge.proxy.recording.DEFAULT_MAX_BYTES`) stops the recording with a last line
saying why, never the run.

Every generation of the agent (after a restart too) is recorded, through the frame observer of
:class:`~acp_bridge.client.options.ClientOptions`. Lines are buffered; the buffer is handed to
the OS when it is :data:`~acp_bridge.proxy.recorder.FLUSH_EVERY_S` old at the next frame, when
it is full, and when the run ends (:meth:`RunRecording.close`).
"""

from __future__ import annotations

import errno
import sys
import time
from typing import Final

from acp_bridge.cli.exit_codes import EXIT_USAGE
from acp_bridge.proxy.recorder import FLUSH_EVERY_S, Recorder
from acp_bridge.rpc.peer import Direction

__all__ = ["RunRecording", "open_recording"]

_DIRECTIONS: Final = {"out": "bridge->agent", "in": "agent->bridge"}


class RunRecording:
    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._flushed_at = time.monotonic()

    def observe(self, direction: Direction, line: bytes) -> None:
        """A frame observer (:data:`acp_bridge.rpc.peer.Observer`): record ``line``."""
        self._recorder.message(_DIRECTIONS[direction], line.rstrip(b"\n"))
        now = time.monotonic()
        if now - self._flushed_at >= FLUSH_EVERY_S:
            self._flushed_at = now
            self._recorder.flush()

    def close(self) -> None:
        self._recorder.close()


def open_recording(path: str | None) -> RunRecording | int | None:
    """The recording ``--record`` asks for (``None`` without it), or, when ``path`` cannot be
    recorded to, the usage error's exit code with its one line said on stderr."""
    if path is None:
        return None
    try:
        return RunRecording(Recorder(path, follow_links=False))
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or exc
        print(f"acp-bridge: cannot record to {path}: {reason}", file=sys.stderr, flush=True)
        return EXIT_USAGE
