"""Reading a pipe as batches of lines, for the relay's hot path.

:class:`~acp_bridge.rpc.framing.LineReader` hands out one line per call; the relay wants every
complete line a read brought, so that a burst of ten thousand updates is forwarded with a few
large writes instead of ten thousand small ones (each of which would wake the editor).

Bounds: one read is at most ``READ_BYTES``; an unfinished line is kept up to ``max_line_bytes``,
past which :class:`~acp_bridge.errors.FramingError` is raised (the stream cannot be
resynchronised, the caller treats it as broken).
"""

from __future__ import annotations

from typing import Final

import anyio
from anyio.abc import ByteReceiveStream

from acp_bridge.errors import ConnectionClosedError, FramingError, ResourceClosedError
from acp_bridge.proxy.frames import UPDATE_PREFIXES

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
        self._max = max_line_bytes
        # A run of complete lines that all start like a session/update (a burst of a turn's
        # updates) is returned as one item, still newline-separated: the relay forwards it in
        # one piece instead of splitting and joining thousands of lines. Off when each line
        # must be seen alone (recording).
        self._coalesce_updates = coalesce_updates
        self._partial: list[bytes] = []
        self._partial_len = 0
        self._at_eof = False
        self.unterminated = False
        """The last batch is a line cut short by EOF (no newline): a writer that died mid-line
        leaves one, so it must be checked in full, never taken by its prefix."""

    async def receive_lines(self) -> list[bytes]:
        """The complete lines of the next read (without newlines; at least one).

        A last line without a newline at EOF is returned as a line, and
        :attr:`unterminated` is set.

        Raises:
            anyio.EndOfStream: the stream ended and every line was returned.
            FramingError: a line is longer than the cap.
            ConnectionClosedError: the other side broke the stream.
            ResourceClosedError: we closed it ourselves.
        """
        while True:
            if self._at_eof:
                raise anyio.EndOfStream
            try:
                chunk = await self._stream.receive(READ_BYTES)
            except anyio.EndOfStream:
                self._at_eof = True
                if self._partial_len:
                    self.unterminated = True
                    return [self._take(b"")]
                raise
            except anyio.BrokenResourceError as exc:
                raise ConnectionClosedError("the peer broke the stream") from exc
            except anyio.ClosedResourceError as exc:
                raise ResourceClosedError("the stream was already closed") from exc
            lines = self._split(chunk)
            if lines:
                return lines

    def _split(self, chunk: bytes) -> list[bytes]:
        first = chunk.find(b"\n")
        if first < 0:
            self._partial.append(chunk)
            self._partial_len += len(chunk)
            self._check(self._partial_len)
            return []
        last = chunk.rfind(b"\n")
        lines = [self._take(chunk[:first])]
        if last > first:
            middle = chunk[first + 1 : last]
            if len(middle) > self._max:  # only then can one of them be too long
                for piece in middle.split(b"\n"):
                    self._check(len(piece))
            if self._coalesce_updates and _all_updates(middle):
                lines.append(middle)  # a block of update lines, forwarded as it came
            else:
                lines += middle.split(b"\n")
        rest = chunk[last + 1 :]
        if rest:
            self._partial.append(rest)
            self._partial_len = len(rest)
            self._check(self._partial_len)
        return lines

    def _take(self, tail: bytes) -> bytes:
        if not self._partial:
            self._check(len(tail))
            return tail
        self._partial.append(tail)
        line = b"".join(self._partial)
        self._partial.clear()
        self._partial_len = 0
        self._check(len(line))
        return line

    def _check(self, size: int) -> None:
        if size > self._max:
            raise FramingError(f"line longer than the {self._max}-byte cap", fatal=True)
