"""GNU readline driven one key at a time, so that another thread may read the line being typed.

The chat redraws the person's half-typed line after writing the agent's output above it, from
the event loop's thread, while the input thread sits in readline. ``input()`` gives no safe way
to do that: readline edits its line buffer with the GIL released, and
``readline.get_line_buffer()`` decodes that buffer while it changes. glibc's multibyte
conversion then finds the string longer on its second pass than on its first and aborts the
whole process (``mbsrtowcs_l.c: Assertion ... failed``; CI met it while someone typed during a
stream).

So the input thread runs readline's callback interface itself, as CPython's own ``input()``
does inside: install the prompt, wait until the terminal has input, hand readline one
keystroke. Each keystroke is handled under :attr:`LockedReadline.lock`, and the line buffer is
read under it too, so a reader never sees the buffer mid-edit. A key that readline must wait on
(an escape sequence's tail) holds the lock at most for readline's key-sequence timeout.

Alt-Enter (ESC then Enter, as terminals send it) also accepts the line, marked as a steer
(:attr:`LockedReadline.steer`): the chat sends it as ``/steer`` would. Bound to a function of
ours through ``rl_bind_keyseq``; where that cannot be bound, Alt-Enter stays readline's.

It needs the GNU readline that Python's ``readline`` module uses, reached through that module's
own shared object (:mod:`ctypes`). Where that is not available (no readline, libedit, a
terminal missing), :meth:`LockedReadline.load` returns None and the chat uses ``input()``
without reading the line from another thread.
"""

from __future__ import annotations

import ctypes
import os
import select
import threading
from collections.abc import Callable
from typing import Any, Final

__all__ = ["LockedReadline"]

_LINE_HANDLER: Final = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_COMMAND: Final = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int)
STEER_KEYS: Final = (b"\\e\\r", b"\\e\\n")
"""Alt-Enter, in readline's key-sequence notation (terminals send ESC CR, some ESC LF)."""


class LockedReadline:
    """readline's callback interface, one keystroke at a time under :attr:`lock`."""

    def __init__(self, library: ctypes.CDLL, libc: ctypes.CDLL, stdin_fd: int) -> None:
        self.lock = threading.Lock()
        self._free = libc.free
        self._free.argtypes = [ctypes.c_void_p]
        self._free.restype = None
        self._stdin_fd = stdin_fd
        self._install = library.rl_callback_handler_install
        self._install.argtypes = [ctypes.c_char_p, _LINE_HANDLER]
        self._install.restype = None
        self._read_char = library.rl_callback_read_char
        self._read_char.argtypes = []
        self._read_char.restype = None
        self._remove = library.rl_callback_handler_remove
        self._remove.argtypes = []
        self._remove.restype = None
        self._resize = library.rl_resize_terminal
        self._resize.argtypes = []
        self._resize.restype = None
        self._buffer = ctypes.c_char_p.in_dll(library, "rl_line_buffer")
        # Signals stay the chat's, as with input() (CPython clears these too): readline would
        # otherwise install its own handlers process-wide, from this thread, around each key
        # (and on Ctrl-C during a key, throw away the line being typed).
        ctypes.c_int.in_dll(library, "rl_catch_signals").value = 0
        ctypes.c_int.in_dll(library, "rl_catch_sigwinch").value = 0
        self._size = self._terminal_size()
        self._line: bytes | None = None
        self._done = False
        # Kept referenced for as long as readline may call it.
        self._handler = _LINE_HANDLER(self._line_taken)
        self.steer = False
        """The last line was accepted with Alt-Enter: send it as a steer."""
        self._steer_command = _COMMAND(self._steer_key)
        self._bind_steer_key(library)

    def _bind_steer_key(self, library: ctypes.CDLL) -> None:
        try:
            bind = library.rl_bind_keyseq
            self._newline = library.rl_newline
        except AttributeError:
            return
        bind.argtypes = [ctypes.c_char_p, _COMMAND]
        bind.restype = ctypes.c_int
        self._newline.argtypes = [ctypes.c_int, ctypes.c_int]
        self._newline.restype = ctypes.c_int
        for keys in STEER_KEYS:
            bind(keys, self._steer_command)

    def _steer_key(self, count: int, key: int) -> int:
        # Called by readline inside rl_callback_read_char (the lock is held).
        self.steer = True
        return int(self._newline(1, key))

    @classmethod
    def load(cls, readline_module: Any, stdin_fd: int, stdout_fd: int) -> LockedReadline | None:
        """The GNU readline behind ``readline_module``, or None where it cannot be used."""
        if readline_module is None:
            return None
        version = str(getattr(readline_module, "_READLINE_LIBRARY_VERSION", ""))
        if "libedit" in (readline_module.__doc__ or "") or version.startswith("EditLine"):
            return None
        if not (os.isatty(stdin_fd) and os.isatty(stdout_fd)):
            return None  # input() would not use readline either
        try:
            # dlsym on the extension module's handle also searches the libraries it links.
            library = ctypes.CDLL(readline_module.__file__)
            libc = ctypes.CDLL(None)
            return cls(library, libc, stdin_fd)
        except (OSError, AttributeError, ValueError):
            return None

    def read_line(self, prompt: str, shown: Callable[[], None]) -> bytes | None:
        """Show ``prompt``, call ``shown`` (without the lock), and read one line (None at the
        end of input: Ctrl-D on an empty line, the terminal gone). Call from one thread only.

        Raises:
            OSError: waiting on the terminal failed.
        """
        self._line, self._done, self.steer = None, False, False
        with self.lock:
            self._install(prompt.encode(), self._handler)
        try:
            shown()
            while not self._done:
                select.select([self._stdin_fd], [], [])
                with self.lock:
                    self._follow_resize()
                    self._read_char()
        except BaseException:
            with self.lock:
                if not self._done:
                    self._remove()
            raise
        return self._line

    def _terminal_size(self) -> os.terminal_size | None:
        try:
            return os.get_terminal_size(self._stdin_fd)
        except OSError:
            return None

    def _follow_resize(self) -> None:
        # With rl_catch_sigwinch off, readline learns of a new width only from us: checked
        # before each key (one ioctl), so the line wraps where the screen thinks it does.
        size = self._terminal_size()
        if size != self._size:
            self._size = size
            self._resize()

    def line_buffer(self) -> str:
        """The line as typed so far (call with :attr:`lock` held)."""
        raw = self._buffer.value
        return raw.decode(errors="replace") if raw else ""

    def _line_taken(self, line: int | None) -> None:
        # Called by readline inside rl_callback_read_char (the lock is held): the line is ours
        # to free. Removing the handler here keeps readline from showing the prompt again.
        if line is not None:
            self._line = ctypes.string_at(line)
            self._free(line)
        self._done = True
        self._remove()
