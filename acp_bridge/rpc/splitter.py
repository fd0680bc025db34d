"""Splitting a byte stream into newline-delimited lines under a byte cap (pure: no I/O).

The one splitter under every NDJSON reader: the JSON-RPC peer's
:class:`~acp_bridge.rpc.framing.LineReader`, the proxy's
:class:`~acp_bridge.proxy.lines.BatchLineReader` and ``acp-bridge run``'s stdin reader. Like
h11's connection it does no I/O: the caller reads, feeds the bytes in with
:meth:`LineSplitter.feed`, gets back the lines they complete, and decides what an over-long
line means (the peer and the proxy treat the stream as broken; stdin refuses that one line and
goes on).

What a line is: the bytes up to a ``\\n``, without it. A ``\\r`` before the ``\\n`` stays part
of the line and counts towards the cap (JSON takes it as whitespace; nothing strips it). The last
line may end at EOF without a newline: :meth:`LineSplitter.end` hands it out.

The cap: a line of ``max_line_bytes`` bytes is fine, one byte more is over-long. An over-long
line is reported exactly once, as :data:`TOO_LONG` in its place among the lines, as soon as it is
known: when its newline arrives, or earlier, as soon as its unfinished start passes the cap. Its
bytes are dropped as they arrive, up to its newline, and the lines after it come out as usual.

The bound: between calls the splitter holds at most ``max_line_bytes`` bytes (the start of an
unfinished line, as the pieces that were fed, joined once when its newline comes: a 20 MB line
costs one copy, not the quadratic ``buffer += chunk``). During a call it also holds the data fed.

Speed: the lines of one chunk are cut with one C-level ``bytes.split``; their lengths are only
checked when the run of whole lines is itself longer than the cap (else none of them can be).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final, cast

from acp_bridge.errors import FramingError

__all__ = ["TOO_LONG", "LineSplitter", "TooLong"]


class TooLong(enum.Enum):
    """The type of :data:`TOO_LONG` (an enum of one, so that ``item is TOO_LONG`` narrows)."""

    LINE = "a line longer than the cap"


TOO_LONG: Final = TooLong.LINE
"""Stands for an over-long line in :meth:`LineSplitter.feed`'s output (its bytes were dropped)."""


class LineSplitter:
    """Bytes in, complete lines out, each at most ``max_line_bytes`` or reported as too long.

    Args:
        max_line_bytes: the longest line handed out (positive).
        keep_whole: when given, asked about each run of whole lines that one fed chunk holds
            after the line it completes (the lines joined by ``\\n``, without the last one's);
            when it answers True the run is handed out as one item, as it came, instead of line
            by line. The proxy forwards a burst of update lines that way without splitting and
            joining them. Only a run no longer than the cap is asked about (so it never holds
            an over-long line).

    Raises:
        ValueError: ``max_line_bytes`` is not positive.
    """

    def __init__(
        self, max_line_bytes: int, *, keep_whole: Callable[[bytes], bool] | None = None
    ) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes: Final = max_line_bytes
        self._keep_whole = keep_whole
        self._partial: list[bytes] = []  # the start of the unfinished line, as fed
        self._partial_len = 0
        self._dropping = False  # inside an over-long line already reported
        self._reported = 0  # over-long lines so far: compared around a feed, no scan of lines

    @property
    def pending_bytes(self) -> int:
        """The bytes held for the unfinished line (at most ``max_line_bytes``)."""
        return self._partial_len

    def feed(self, data: bytes) -> list[bytes | TooLong]:
        """The lines that ``data`` completes, in order, with :data:`TOO_LONG` for each line
        that turned out longer than the cap (including one still unfinished)."""
        cap = self.max_line_bytes
        if self._keep_whole is None:
            lines = data.split(b"\n")  # the list handed out: no second copy of it
            rest = lines.pop()  # after the last newline (all of data without one)
            if not lines:
                return self._hold(rest, [])
            run_bytes = len(data) - len(lines[0]) - len(rest) - 2  # the lines after the first
        else:
            first = data.find(b"\n")
            if first < 0:
                return self._hold(data, [])
            last = data.rfind(b"\n")
            rest = data[last + 1 :]
            run_bytes = last - first - 1
            if 0 <= run_bytes <= cap and self._keep_whole(run := data[first + 1 : last]):
                lines = [data[:first], run]
            else:
                lines = data[:last].split(b"\n")
        out = cast("list[bytes | TooLong]", lines)  # TOO_LONG may take an over-long line's place
        # Only a run longer than the cap can hold an over-long line: else no length is looked at.
        if run_bytes > cap and max(map(len, lines)) > cap:
            self._mark_too_long(out)
        self._finish(lines[0], out)
        return self._hold(rest, out) if rest else out

    def feed_until_too_long(self, data: bytes) -> tuple[list[bytes], bool]:
        """:meth:`feed`, for a caller that an over-long line stops: the lines before the first
        over-long one, and whether there was one (then the rest of the stream is of no use)."""
        reported = self._reported
        lines = self.feed(data)
        if self._reported == reported:  # the common case: nothing to look for
            return cast("list[bytes]", lines), False
        return cast("list[bytes]", lines[: lines.index(TOO_LONG)]), True

    def too_long_error(self) -> FramingError:
        """The error for a stream that carried an over-long line (it cannot be resynchronised)."""
        return FramingError(f"line longer than the {self.max_line_bytes}-byte cap", fatal=True)

    def end(self) -> bytes | None:
        """At EOF: the last line, if it ended without a newline (None if there is none, or if
        it was over-long: that was reported already). The splitter is then empty."""
        dropped, self._dropping = self._dropping, False
        if dropped or not self._partial_len:
            self._partial.clear()
            return None
        return self._take(b"")

    def _finish(self, head: bytes, out: list[bytes | TooLong]) -> None:
        """``out[0]``, the bytes before the first newline, ends the pending line (if any)."""
        if self._dropping:
            self._dropping = False  # the end of an over-long line already reported
            del out[0]
        elif self._partial_len + len(head) > self.max_line_bytes:
            self._partial.clear()
            self._partial_len = 0
            self._reported += 1
            out[0] = TOO_LONG
        elif self._partial:
            out[0] = self._take(head)

    def _mark_too_long(self, out: list[bytes | TooLong]) -> None:
        """Over-long lines after the first are replaced by TOO_LONG, in place."""
        cap = self.max_line_bytes
        for index in range(1, len(out)):
            line = out[index]
            if isinstance(line, bytes) and len(line) > cap:
                self._reported += 1
                out[index] = TOO_LONG

    def _hold(self, piece: bytes, out: list[bytes | TooLong]) -> list[bytes | TooLong]:
        """The start of a line whose newline has not come yet; returns ``out``."""
        if self._dropping or not piece:
            return out
        size = self._partial_len + len(piece)
        if size > self.max_line_bytes:  # known too long before its end: reported now
            self._partial.clear()
            self._partial_len = 0
            self._dropping = True
            self._reported += 1
            out.append(TOO_LONG)
        else:
            self._partial.append(piece)
            self._partial_len = size
        return out

    def _take(self, tail: bytes) -> bytes:
        self._partial.append(tail)
        line = b"".join(self._partial)
        self._partial.clear()
        self._partial_len = 0
        return line
