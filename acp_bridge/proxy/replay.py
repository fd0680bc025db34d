"""``acp-bridge replay FILE``: a recording served as an agent on stdio (see :mod:`.script`).

Reading the file (:func:`read_exchanges`) is bounded, whatever the file holds: only a regular
file is read (``/dev/zero`` or a FIFO is refused before a byte is read), line by line, each line
at most :data:`MAX_LINE_BYTES` and the whole at most ``max_bytes`` (what is read up to the
agent's first exit), and every line must be strict JSON (:func:`~.recording.loads_strict`: no
NaN, nesting at most :data:`~.recording.MAX_DEPTH` deep). Anything else is a
:class:`~.script.RecordingError` naming the line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, BinaryIO

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from acp_bridge.errors import (
    ConnectionClosedError,
    FramingError,
    ResourceClosedError,
    UnsafeFileError,
)
from acp_bridge.proxy.answers import INTERNAL_ERROR, error_answer
from acp_bridge.proxy.recording import DEFAULT_MAX_BYTES, NotJsonError, loads_strict
from acp_bridge.proxy.script import (
    Divergence,
    Exchange,
    RecordingError,
    ReplayScript,
    load_exchanges,
)
from acp_bridge.rpc.framing import LineReader, LineWriter
from acp_bridge.safe_files import open_regular

__all__ = ["EXIT_DIVERGED", "MAX_LINE_BYTES", "read_exchanges", "serve_replay"]

log = logging.getLogger(__name__)

EXIT_DIVERGED = 4

MAX_LINE_BYTES = 128 * 1024 * 1024
"""The longest recording line read: twice the proxy's default ``--max-message-bytes``, so a
message of that size fits with its envelope."""


def read_exchanges(
    path: str, *, allow_partial: bool = False, max_bytes: int = DEFAULT_MAX_BYTES
) -> list[Exchange]:
    """The agent's side of the recording at ``path`` (see :func:`~.script.load_exchanges`).

    Raises:
        OSError: it cannot be opened.
        RecordingError: it is not a regular file, or not a usable recording (the reason names
            the line).
    """
    try:
        fd = open_regular(path)  # never blocking on a FIFO
    except UnsafeFileError as exc:
        raise RecordingError(exc.reason) from exc
    with open(fd, "rb") as file:
        return load_exchanges(_bounded_lines(file, max_bytes), allow_partial=allow_partial)


def _bounded_lines(file: BinaryIO, max_bytes: int) -> Iterator[bytes]:
    total = 0
    number = 0
    while True:
        cap = min(MAX_LINE_BYTES, max_bytes - total)
        line = file.readline(cap + 1)
        if not line:
            return
        number += 1
        total += len(line)
        if len(line) > cap:
            if cap < MAX_LINE_BYTES:
                raise RecordingError(f"it is longer than {max_bytes} bytes (--max-bytes)")
            raise RecordingError(
                f"line {number} has no end within {MAX_LINE_BYTES} bytes (the longest line read)"
            )
        yield line


def _line(message: dict[str, Any]) -> bytes:
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode() + b"\n"


async def serve_replay(
    script: ReplayScript,
    client_in: ByteReceiveStream,
    client_out: ByteSendStream,
    *,
    allow_partial: bool = False,
) -> tuple[int, str | None]:
    """Serve until the client closes (or diverges); the exit code and what went wrong."""
    writer = LineWriter(client_out)
    reader = LineReader(client_in)
    outcome: tuple[int, str | None] = (0, None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        try:
            for message in script.prologue:
                await writer.send_line(_line(message))
            outcome = await _serve(script, reader, writer, allow_partial)
        except (ConnectionClosedError, ResourceClosedError):
            outcome = (EXIT_DIVERGED, "the client stopped reading")
        finally:
            writer.close()
    return outcome


async def _serve(
    script: ReplayScript, reader: LineReader, writer: LineWriter, allow_partial: bool
) -> tuple[int, str | None]:
    while True:
        try:
            line = await reader.receive_line()
        except anyio.EndOfStream:
            if script.finished or allow_partial:
                return 0, None
            return EXIT_DIVERGED, f"the client closed the connection after {script.progress}"
        except FramingError as exc:
            return EXIT_DIVERGED, f"the client sent a line the replay cannot read: {exc}"
        if not line.strip():
            continue
        try:
            message = loads_strict(line)
        except NotJsonError:
            message = None
        if not isinstance(message, dict):
            return EXIT_DIVERGED, "the client sent a line that is not a JSON-RPC message"
        reply = script.receive(message)
        if isinstance(reply, Divergence):
            if "method" in message and "id" in message:
                error = error_answer(message["id"], INTERNAL_ERROR, reply.message)
                await writer.send_line(error + b"\n", wait_written=True)
            return EXIT_DIVERGED, reply.message
        for outgoing in reply:
            await writer.send_line(_line(outgoing))
