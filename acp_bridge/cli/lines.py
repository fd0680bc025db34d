"""Splitting a byte stream into lines of bounded length (pure: no I/O, no anyio).

``acp-bridge run`` reads its messages from stdin, one per line. A line is bytes up to ``\\n``
(the ``\\n`` is not part of it); the last line may end at EOF without one.

The bound: :class:`LineSplitter` holds at most ``max_bytes`` plus one fed chunk. A line longer
than ``max_bytes`` is reported as :data:`TOO_LONG` as soon as that is known (without waiting
for its end), and its remaining bytes are dropped as they arrive, up to its ``\\n``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TOO_LONG", "LineSplitter", "SplitLine"]

TOO_LONG: Final = None
"""A line's content when it was longer than the bound (its bytes were dropped)."""

SplitLine = tuple[int, "bytes | None"]
"""(line number from 1, the line's bytes, or TOO_LONG)."""


class LineSplitter:
    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, not {max_bytes}")
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._number = 0
        self._dropping = False  # inside a line already reported TOO_LONG

    def feed(self, chunk: bytes) -> list[SplitLine]:
        """The lines that ``chunk`` completes (or reveals as too long), in order."""
        lines: list[SplitLine] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if self._dropping:
                if end >= 0:
                    self._dropping = False
            else:
                self._buffer += piece
                if len(self._buffer) > self.max_bytes:
                    self._number += 1
                    lines.append((self._number, TOO_LONG))
                    self._buffer.clear()
                    self._dropping = end < 0
                elif end >= 0:
                    self._number += 1
                    lines.append((self._number, bytes(self._buffer)))
                    self._buffer.clear()
            if end < 0:
                break
            start = end + 1
        return lines

    def end(self) -> list[SplitLine]:
        """At EOF: the last line, if it had no ``\\n``."""
        if self._dropping or not self._buffer:
            return []
        self._number += 1
        line = bytes(self._buffer)
        self._buffer.clear()
        return [(self._number, line)]
