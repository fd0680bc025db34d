"""The chat's prompt line: ``input()`` with readline, in a daemon thread, one line at a time.

The thread shows the prompt only when the chat asks for the next line
(:meth:`TypedLineReader.next`), so a line is handled (sent, answered, a command run) before the
next prompt appears. Each line, or the end of input (Ctrl-D, the terminal gone), is handed to
the event loop by ``deliver``.

The thread is a daemon: when the chat leaves while it waits in readline, it is abandoned (the
process exits anyway); the chat restores the terminal's settings itself, as readline leaves
them changed while it reads.

History: readline's, kept in a file (mode 0600) under the state directory, at most
:data:`HISTORY_LINES` lines (older ones are dropped when it is written back). Lines that answer
a permission question are not added.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import sys
import termios
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from acp_bridge.cli.chat_readline import LockedReadline
from acp_bridge.cli.chat_screen import ChatScreen
from acp_bridge.cli.conversation_setup import make_private_dir

__all__ = [
    "HISTORY_LINES",
    "EndOfInput",
    "History",
    "Line",
    "TypedLineReader",
    "line_buffer",
    "restore_terminal",
    "save_terminal",
]

HISTORY_LINES: Final = 1000

try:
    import readline as _readline
except ImportError:  # no readline on this platform: plain input()
    _readline = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Line:
    text: str


@dataclass(frozen=True)
class EndOfInput:
    reason: str = ""


_locked: LockedReadline | None = None
"""readline driven by the input thread key by key, once a :class:`TypedLineReader` has loaded
it."""


def line_buffer() -> str:
    """What the person has typed on the prompt line so far, read from another thread between
    two keystrokes; "" where readline cannot be read safely from another thread (see
    :mod:`.chat_readline`: ``readline.get_line_buffer()`` there could abort the process)."""
    locked = _locked
    if locked is None:
        return ""
    with locked.lock:
        return locked.line_buffer()


def _on_prompt_shown(hook: Callable[[], None]) -> None:
    """Run ``hook`` once readline has printed the prompt, before it reads (without readline,
    at once)."""
    if _readline is None:
        hook()
    else:
        _readline.set_pre_input_hook(hook)


class History:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> None:
        if _readline is None:
            return
        _readline.set_auto_history(False)  # answers to questions stay out of it
        _readline.set_history_length(HISTORY_LINES)
        with contextlib.suppress(OSError):
            _readline.read_history_file(str(self.path))

    def add(self, text: str) -> None:
        if _readline is not None and text.strip():
            _readline.add_history(text)

    def save(self) -> None:
        """Write the history back (bounded by :data:`HISTORY_LINES`), mode 0600; under the
        readline lock, as the abandoned input thread may still be handling a key."""
        if _readline is None:
            return
        locked = _locked
        with (
            locked.lock if locked is not None else contextlib.nullcontext(),
            contextlib.suppress(OSError),
        ):
            make_private_dir(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.fchmod(fd, 0o600)
            os.close(fd)
            _readline.write_history_file(str(self.path))


class TypedLineReader:
    """The lines the user types at the chat's prompt, read with readline in a daemon thread
    and handed to the event loop one at a time (the module's text). Not the byte-stream
    :class:`acp_bridge.rpc.framing.LineReader`."""

    def __init__(self, screen: ChatScreen, deliver: Callable[[Line | EndOfInput], None]) -> None:
        global _locked
        self._screen = screen
        self._deliver = deliver
        try:
            stdin_fd, stdout_fd = sys.stdin.fileno(), sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):
            _locked = None
        else:
            _locked = LockedReadline.load(_readline, stdin_fd, stdout_fd)
        self._prompts: queue.Queue[str | None] = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._run, name="chat-input", daemon=True)

    def start(self, prompt: str) -> None:
        self._prompts.put(prompt)
        self._thread.start()

    def next(self, prompt: str) -> None:
        """Show ``prompt`` and read the next line (call once per delivered line)."""
        with contextlib.suppress(queue.Full):
            self._prompts.put_nowait(prompt)

    def stop(self) -> None:
        """No more prompts (a thread waiting in readline is abandoned)."""
        with contextlib.suppress(queue.Full):
            self._prompts.put_nowait(None)

    def _run(self) -> None:
        while True:
            prompt = self._prompts.get()
            if prompt is None:
                return
            try:
                text = self._read(prompt)
            except EOFError:
                self._hand_over(EndOfInput())
                return
            except UnicodeDecodeError:
                self._screen.line_entered(prompt, "")
                self._screen.write("err", "acp-bridge: that line was not UTF-8; not sent\n")
                self._prompts.put(prompt)
                continue
            except (OSError, ValueError) as exc:  # the terminal went away
                self._hand_over(EndOfInput(str(exc)))
                return
            self._screen.line_entered(prompt, text)
            if not self._hand_over(Line(text)):
                return

    def _read(self, prompt: str) -> str:
        """One line from readline (``input()`` where it cannot be driven key by key)."""
        shown = functools.partial(self._screen.prompt_shown, prompt)
        if _locked is None:
            _on_prompt_shown(shown)
            return input(prompt)
        line = _locked.read_line(prompt, shown)
        if line is None:
            raise EOFError
        text = line.decode()
        if _locked.steer:  # Alt-Enter: the line is a steer, as /steer TEXT
            return f"/steer {text}"
        return text

    def _hand_over(self, item: Line | EndOfInput) -> bool:
        try:
            self._deliver(item)
        except RuntimeError:  # the event loop is gone: the chat has ended
            return False
        return True


def save_terminal() -> list[Any] | None:
    try:
        return termios.tcgetattr(sys.stdin.fileno())
    except (termios.error, OSError, ValueError):
        return None


def restore_terminal(saved: list[Any] | None) -> None:
    if saved is None:
        return
    with contextlib.suppress(termios.error, OSError, ValueError):
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, saved)
