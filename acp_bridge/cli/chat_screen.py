"""The chat's terminal: finished output scrolls up, a footer stays at the bottom.

The footer is, top to bottom: the agent's line still being written (the partial line, on
stdout), the status line while the agent works (stderr, only when stderr is a terminal), a
waiting permission question (stdout), and the prompt line with what the person has typed so
far (drawn by readline in the input thread). Every write goes through :meth:`ChatScreen.write`
(``sys.stdout`` and ``sys.stderr`` are replaced by :class:`ScreenStream` while the chat runs),
which erases the footer, writes the finished lines above it and draws it again. So text the
agent streams never lands in the middle of the line being typed.

Off a terminal (stdout redirected), writes go straight through and there is no footer.

Bounds: the partial line is at most :data:`PARTIAL_MAX` characters; at the bound it is written
out as a finished line and a new one starts. The footer shows only the partial line's tail that
fits in half the screen: a footer taller than the screen would push its top into the
scrollback at every redraw, where no erase reaches it, and leave a copy there each time (the
whole line is written once, above the footer, when it is finished). Erasing counts the
footer's rows at the width the terminal has now, so a window narrowed mid-stream (whose
terminal re-wraps what is drawn) is erased whole too.

Threads: the loop thread writes; the input thread announces the prompt it is about to show and
the line it read. A lock orders them. readline redraws its own line as the person types; this
module only redraws it (prompt and buffer, cursor at the end) after writing above it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Final, TextIO, cast

from acp_bridge.cli.columns import display_width

__all__ = [
    "PARTIAL_MAX",
    "ChatScreen",
    "ScreenStream",
    "display_width",
    "streams_through",
]

PARTIAL_MAX: Final = 4096
_ERASE_BELOW: Final = "\x1b[J"


_ESCAPES: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _no_buffer() -> str:
    return ""


class ChatScreen:
    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        *,
        line_buffer: Callable[[], str] = _no_buffer,
        columns: Callable[[], int] | None = None,
        lines: Callable[[], int] | None = None,
    ) -> None:
        self.out = out
        self.err = err
        self.fancy = out.isatty()
        self._status_shown = err.isatty()
        self._line_buffer = line_buffer
        self._columns = columns or (lambda: self._size().columns)
        self._lines = lines or (lambda: self._size().lines)
        self._lock = threading.Lock()
        self._partial = {"out": "", "err": ""}
        self._status = ""
        self._question = ""
        self._prompt: str | None = None
        self._footer_rows = 0  # rows the footer takes above the prompt line
        self._drawn: list[str] = []  # the footer's texts above the prompt line, as drawn

    def _size(self) -> os.terminal_size:
        """The terminal's size now, asked of the terminal: not ``$COLUMNS``/``$LINES``, which
        readline exports once and which go stale when the window is resized."""
        try:
            return os.get_terminal_size(self.out.fileno())
        except (OSError, ValueError):
            return shutil.get_terminal_size()

    # -- writers ---------------------------------------------------------------------------

    def write(self, stream: str, text: str) -> None:
        """Write ``text`` to ``stream`` ("out" or "err") above the footer."""
        if not text:
            return
        with self._lock:
            if not self.fancy:
                target = self.out if stream == "out" else self.err
                target.write(text)
                target.flush()
                return
            self._erase()
            pending = self._partial[stream] + text
            finished, newline, rest = pending.rpartition("\n")
            if len(rest) > PARTIAL_MAX:
                finished, newline, rest = pending, "\n", ""
            if newline:
                target = self.out if stream == "out" else self.err
                target.write(finished + "\n")
                target.flush()
            self._partial[stream] = rest
            self._draw()

    def set_status(self, text: str) -> None:
        if text != self._status:  # unchanged: no redraw under the person's typing
            self._change(lambda: setattr(self, "_status", text))

    def set_question(self, text: str) -> None:
        if text != self._question:
            self._change(lambda: setattr(self, "_question", text))

    def close(self) -> None:
        """Erase the footer and write out what is left of the partial lines."""
        with self._lock:
            if self.fancy:
                self._erase()
            for stream, target in (("out", self.out), ("err", self.err)):
                rest = self._partial[stream]
                if rest:
                    target.write(rest + "\n")
                    target.flush()
                    self._partial[stream] = ""
            self._status = self._question = ""
            self._prompt = None
            self._footer_rows = 0
            self._drawn = []
            self.fancy = False

    # -- the input thread --------------------------------------------------------------

    def prompt_shown(self, prompt: str) -> None:
        """readline has printed ``prompt`` (below the footer) and is about to read: from now on
        the prompt line is part of the footer. Drawn again at once, which also repairs a
        redraw that came between readline printing the prompt and this call."""
        with self._lock:
            self._prompt = prompt
            if self.fancy:
                self._erase()
                self._draw()

    def line_entered(self, prompt: str, text: str) -> None:
        """readline took a line (the cursor went to the next row): keep ``prompt + text`` as
        a finished line above the footer, which is drawn again without a prompt."""
        with self._lock:
            if not self.fancy:
                self._prompt = None
                return
            up = min(self._drawn_rows() + self._rows(prompt + text), self._screen_rows() - 1)
            self.out.write("\r" + (f"\x1b[{up}A" if up else "") + _ERASE_BELOW)
            self._prompt = None
            self._footer_rows = 0
            self._drawn = []
            self.out.write(prompt + text + "\n")
            self.out.flush()
            self._draw()

    # -- drawing -----------------------------------------------------------------------

    def _change(self, change: Callable[[], None]) -> None:
        with self._lock:
            if not self.fancy:
                change()
                return
            self._erase()
            change()
            self._draw()

    def _erase(self) -> None:
        """Go to the footer's first row and clear to the end of the screen. The cursor is at
        the end of the prompt line (readline's line, as typed so far), or below the footer."""
        up = self._drawn_rows()
        if self._prompt is not None:
            up += self._rows(self._prompt + self._line_buffer()) - 1
        up = min(up, self._screen_rows() - 1)  # the top row is as far as the cursor goes
        self.out.write("\r" + (f"\x1b[{up}A" if up else "") + _ERASE_BELOW)
        self._footer_rows = 0
        self._drawn = []

    def _draw(self) -> None:
        drawn: list[str] = []
        partial = self._partial["out"] or self._partial["err"]
        if partial:
            partial = self._tail(partial, max(1, (self._screen_rows() - 2) // 2))
            self.out.write(partial + "\n")
            drawn.append(partial)
        self.out.flush()
        if self._status and self._status_shown:
            self.err.write(self._status + "\x1b[K\n")
            self.err.flush()
            drawn.append(self._status)
        if self._question:
            self.out.write(self._question + "\n")
            drawn.extend(self._question.split("\n"))
        if self._prompt is not None:
            self.out.write(self._prompt + self._line_buffer())
        self.out.flush()
        self._drawn = drawn
        self._footer_rows = self._drawn_rows()

    def _drawn_rows(self) -> int:
        """Rows the footer's texts above the prompt line take at the width the terminal has
        now (a terminal that re-wraps on a resize has them on this many rows)."""
        return sum(self._rows(text) for text in self._drawn)

    def _tail(self, text: str, rows: int) -> str:
        """``text``, or its end after an ellipsis when it would take more than ``rows`` rows."""
        if self._rows(text) <= rows:
            return text
        room = rows * max(1, self._columns()) - 1
        plain = _ESCAPES.sub("", text)  # a cut must not split a color sequence
        kept: list[str] = []
        for ch in reversed(plain):
            room -= display_width(ch)
            if room < 0:
                break
            kept.append(ch)
        return "\u2026" + "".join(reversed(kept))

    def _rows(self, text: str) -> int:
        columns = max(1, self._columns())
        return max(1, -(-display_width(text) // columns))

    def _screen_rows(self) -> int:
        return max(2, self._lines())


class ScreenStream:
    """Stands in for ``sys.stdout`` or ``sys.stderr``: writes go through the screen. Keeps the
    real stream's file descriptor and encoding, so ``input()`` still uses readline."""

    def __init__(self, screen: ChatScreen, stream: str, real: TextIO) -> None:
        self._screen = screen
        self._stream = stream
        self._real = real
        self.encoding = real.encoding
        self.errors = real.errors

    def write(self, text: str) -> int:
        self._screen.write(self._stream, text)
        return len(text)

    def flush(self) -> None:
        """Writes are flushed as they are made."""

    def fileno(self) -> int:
        return self._real.fileno()

    def isatty(self) -> bool:
        return self._real.isatty()

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def streams_through(out: ScreenStream, err: ScreenStream) -> Iterator[None]:
    """While the chat runs, everything else written to stdout and stderr (logs, the agent's
    stderr with -v) goes above the footer too."""
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = cast(TextIO, out), cast(TextIO, err)
    handlers = [
        handler
        for handler in logging.getLogger().handlers
        if isinstance(handler, logging.StreamHandler) and handler.stream is real_err
    ]
    for handler in handlers:
        handler.setStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = real_out, real_err
        for handler in handlers:
            handler.setStream(real_err)
