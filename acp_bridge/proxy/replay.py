"""``acp-bridge replay FILE``: a recording served as an agent on stdio (see :mod:`.script`)."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from acp_bridge.errors import ConnectionClosedError, FramingError, ResourceClosedError
from acp_bridge.proxy.answers import INTERNAL_ERROR, error_answer
from acp_bridge.proxy.script import Divergence, ReplayScript
from acp_bridge.rpc.framing import LineReader, LineWriter

__all__ = ["EXIT_DIVERGED", "serve_replay"]

log = logging.getLogger(__name__)

EXIT_DIVERGED = 4


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


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
            message = json.loads(line)
        except (ValueError, RecursionError):
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
