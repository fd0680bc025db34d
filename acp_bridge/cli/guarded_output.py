"""Output whose reader may go away: ``acp-bridge run ... | head -1``, ``conversations | head``.

The reader of a pipe may close it at any time; the next write then raises BrokenPipeError (the
interpreter ignores SIGPIPE), and left alone that ends in a traceback, if not at the write then
at the interpreter's last flush. Other output errors end the output the same way (issue 21): a
full disk or ``> /dev/full`` (ENOSPC), a terminal that went away (EIO: the window closed,
``tmux kill-session``), a file over its size limit (EFBIG). :class:`GuardedOutput` is the one way
the CLI handles them all: the first such error points the descriptor at /dev/null, tells
``on_closed`` once, and every later write is dropped. What the command does then is its own
policy: ``run`` stops as on a first signal (exit 130); the listings (``conversations``,
``show``, ``agents``) have nothing left to do for that reader and end as they would have
(:func:`guarded_stdout`).

Light: the standard library only.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import TextIO, cast

__all__ = ["GuardedOutput", "guarded_stderr", "guarded_stdout", "is_terminal"]


class GuardedOutput(io.TextIOBase):
    """A text stream whose reader may go away (see the module docstring)."""

    def __init__(self, stream: TextIO, on_closed: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._stream = stream
        self._on_closed = on_closed
        self.closed_by_reader = False
        """True once the output ended: its reader went away, or a write failed."""
        self.error: OSError | None = None
        """The error that ended the output (BrokenPipeError when its reader closed it)."""

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                self._stream.write(text)
            except OSError as exc:
                self._reader_gone(exc)
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except OSError as exc:
                self._reader_gone(exc)

    def isatty(self) -> bool:
        return is_terminal(self._stream)

    def fileno(self) -> int:
        """The guarded stream's descriptor (a terminal's size is asked of it)."""
        return self._stream.fileno()

    def _reader_gone(self, error: OSError) -> None:
        self.closed_by_reader = True
        self.error = error
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


@contextlib.contextmanager
def guarded_stderr() -> Iterator[GuardedOutput]:
    """``sys.stderr`` guarded for the block: a note that cannot be written (the terminal went
    away, stderr is a full disk) is dropped instead of ending the command in a traceback."""
    saved = sys.stderr
    guarded = GuardedOutput(saved)
    sys.stderr = cast(TextIO, guarded)
    try:
        yield guarded
        guarded.flush()
    finally:
        sys.stderr = saved


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal; False for a closed or detached one."""
    try:
        return stream.isatty()
    except (ValueError, OSError):
        return False
