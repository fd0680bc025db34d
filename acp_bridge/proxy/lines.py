"""Reading a pipe as batches of lines, for the relay's hot path.

:class:`~acp_bridge.rpc.framing.LineReader` hands out one line per call; the relay wants every
complete line a read brought, so that a burst of ten thousand updates is forwarded with a few
large writes instead of ten thousand small ones (each of which would wake the editor).

The lines are cut by the I/O-free :class:`~acp_bridge.rpc.splitter.LineSplitter`. Bounds: one
read is at most ``READ_BYTES``; an unfinished line is kept up to ``max_line_bytes``. The policy at
the cap: a line over it (finished or not) raises :class:`~acp_bridge.errors.FramingError` once the
lines before it were returned (the stream cannot be resynchronised; the caller treats it as
broken).
"""

from __future__ import annotations

from typing import Final

import anyio
from anyio.abc import ByteReceiveStream

from acp_bridge.errors import ConnectionClosedError, ResourceClosedError
from acp_bridge.proxy.frames import UPDATE_PREFIXES
from acp_bridge.rpc.splitter import LineSplitter

__all__ = ["BatchLineReader"]


_LINE_STARTS: Final = tuple((prefix, b"\n" + prefix) for prefix in UPDATE_PREFIXES)


def _all_updates(block: bytes) -> bool:
    """Whether every line of ``block`` (newline-separated, no trailing newline) starts like a
    ``session/update``: counted in C, not looped over in Python. The prefixes differ before
    their end, so a line start matches at most one of them; an agent writes one style, so the
    first prefix usually accounts for every line and the second is never counted (these passes
    over the block are a tenth of the relay's CPU during a flood)."""
    lines = block.count(b"\n") + 1
    found = 0
    for prefix, after_newline in _LINE_STARTS:
        found += block.startswith(prefix) + block.count(after_newline)
        if found == lines:
            return True
    return False


READ_BYTES: Final = 256 * 1024


class BatchLineReader:
    def __init__(
        self, stream: ByteReceiveStream, *, max_line_bytes: int, coalesce_updates: bool = False
    ) -> None:
        self._stream = stream
        # A run of complete lines that all start like a session/update (a burst of a turn's
        # updates) is returned as one item, still newline-separated: the relay forwards it in
        # one piece instead of splitting and joining thousands of lines. Off when each line
        # must be seen alone (recording).
        self._splitter = LineSplitter(
            max_line_bytes, keep_whole=_all_updates if coalesce_updates else None
        )
        self._at_eof = False
        self._too_long = False  # a line over the cap came: raised after the lines before it
        self.unterminated = False
        """The last batch is a line cut short by EOF (no newline): a writer that died mid-line
        leaves one, so it must be checked in full, never taken by its prefix."""

    async def receive_lines(self) -> list[bytes]:
        """The complete lines of the next read (without newlines; at least one).

        A last line without a newline at EOF is returned as a line, and
        :attr:`unterminated` is set.

        Raises:
            anyio.EndOfStream: the stream ended and every line was returned.
            FramingError: a line is longer than the cap (and every line before it was returned).
            ConnectionClosedError: the other side broke the stream.
            ResourceClosedError: we closed it ourselves.
        """
        splitter = self._splitter
        while True:
            if self._too_long:
                raise splitter.too_long_error()
            if self._at_eof:
                raise anyio.EndOfStream
            try:
                chunk = await self._stream.receive(READ_BYTES)
            except anyio.EndOfStream:
                self._at_eof = True
                last = splitter.end()
                if last is not None:
                    self.unterminated = True
                    return [last]
                raise
            except anyio.BrokenResourceError as exc:
                raise ConnectionClosedError("the peer broke the stream") from exc
            except anyio.ClosedResourceError as exc:
                raise ResourceClosedError("the stream was already closed") from exc
            lines, self._too_long = splitter.feed_until_too_long(chunk)
            if lines:
                return lines
