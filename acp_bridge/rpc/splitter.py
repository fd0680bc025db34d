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
            joining them. Such a run never holds an over-long line.

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
        out: list[bytes | TooLong] = []
        first = data.find(b"\n")
        if first < 0:
            self._hold(data, out)
            return out
        self._finish(data[:first], out)
        last = data.rfind(b"\n")
        if last > first:
            self._whole_lines(data[first + 1 : last], out)
        if last + 1 < len(data):
            self._hold(data[last + 1 :], out)
        return out

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

    def _finish(self, tail: bytes, out: list[bytes | TooLong]) -> None:
        """The newline of the pending line (or of a line starting the chunk) arrived."""
        if self._dropping:
            self._dropping = False  # the end of an over-long line already reported
        elif self._partial_len + len(tail) > self.max_line_bytes:
            self._partial.clear()
            self._partial_len = 0
            self._report(out)
        elif self._partial:
            out.append(self._take(tail))
        else:
            out.append(tail)

    def _whole_lines(self, run: bytes, out: list[bytes | TooLong]) -> None:
        """Lines that start and end within one chunk, joined by ``\\n``."""
        lines: list[bytes] | None = None
        cap = self.max_line_bytes
        if len(run) > cap:  # only then can one of its lines be too long
            lines = run.split(b"\n")
            if max(map(len, lines)) > cap:
                for line in lines:
                    if len(line) > cap:
                        self._report(out)
                    else:
                        out.append(line)
                return
        if self._keep_whole is not None and self._keep_whole(run):
            out.append(run)
        else:
            out += run.split(b"\n") if lines is None else lines

    def _hold(self, piece: bytes, out: list[bytes | TooLong]) -> None:
        """The start of a line whose newline has not come yet."""
        if self._dropping or not piece:
            return
        size = self._partial_len + len(piece)
        if size > self.max_line_bytes:  # known too long before its end: reported now
            self._partial.clear()
            self._partial_len = 0
            self._dropping = True
            self._report(out)
        else:
            self._partial.append(piece)
            self._partial_len = size

    def _take(self, tail: bytes) -> bytes:
        self._partial.append(tail)
        line = b"".join(self._partial)
        self._partial.clear()
        self._partial_len = 0
        return line

    def _report(self, out: list[bytes | TooLong]) -> None:
        self._reported += 1
        out.append(TOO_LONG)
