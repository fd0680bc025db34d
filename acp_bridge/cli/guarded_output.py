"""Output whose reader may go away: ``acp-bridge run ... | head -1``, ``conversations | head``.

The reader of a pipe may close it at any time; the next write then raises BrokenPipeError (the
interpreter ignores SIGPIPE), and left alone that ends in a traceback, if not at the write then
at the interpreter's last flush. :class:`GuardedOutput` is the one way the CLI handles it: the
first BrokenPipeError points the descriptor at /dev/null, tells ``on_closed`` once, and every
later write is dropped. What the command does then is its own policy: ``run`` stops as on a
first signal (exit 130); the listings (``conversations``, ``show``, ``agents``) have nothing
left to do for that reader and end as they would have (:func:`guarded_stdout`).

Light: the standard library only.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import TextIO, cast

__all__ = ["GuardedOutput", "guarded_stdout", "is_terminal"]


class GuardedOutput(io.TextIOBase):
    """A text stream whose reader may go away (see the module docstring)."""

    def __init__(self, stream: TextIO, on_closed: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._stream = stream
        self._on_closed = on_closed
        self.closed_by_reader = False

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def isatty(self) -> bool:
        return is_terminal(self._stream)

    def _reader_gone(self) -> None:
        self.closed_by_reader = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        if self._on_closed is not None:
            self._on_closed()


@contextlib.contextmanager
def guarded_stdout() -> Iterator[GuardedOutput]:
    """``sys.stdout`` guarded for the block (``print`` included), and flushed at its end, so a
    reader that went away, even before the first flush, ends the output quietly."""
    saved = sys.stdout
    guarded = GuardedOutput(saved)
    sys.stdout = cast(TextIO, guarded)
    try:
        yield guarded
        guarded.flush()
    finally:
        sys.stdout = saved


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal; False for a closed or detached one."""
    try:
        return stream.isatty()
    except (ValueError, OSError):
        return False
