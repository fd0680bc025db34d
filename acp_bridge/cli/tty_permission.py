"""``--permission ask``: asking a person on the controlling terminal.

stdin may carry the messages and stdout the agent's text, so the question goes to ``/dev/tty``
(read and written through separate handles: a text file opened ``r+`` on a terminal raises, as
it is not seekable). The answer is read in a worker thread that polls, so a cancelled question
(the turn ended, a signal) lets go of the terminal within a poll interval instead of keeping
the bridge alive until someone presses Enter.

With no terminal at all (a pipeline, a service), ``ask`` cannot ask: it warns once and denies.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from typing import Any, Final

import anyio

from acp_bridge.client.permissions import PermissionMode, PermissionPolicy

__all__ = ["permission_policy", "terminal_available"]

TTY_PATH: Final = "/dev/tty"
_POLL_S: Final = 0.2
_MAX_ANSWER_BYTES: Final = 256
_ASKS: Final = 3
"""Answers that are none of the choices are asked again, at most this many times in all."""
_LETTER_KINDS: Final = {
    "y": ("allow_once", "allow_always"),
    "yes": ("allow_once", "allow_always"),
    "a": ("allow_always",),
    "always": ("allow_always",),
    "n": ("reject_once", "reject_always"),
    "no": ("reject_once", "reject_always"),
}


def terminal_available(path: str = TTY_PATH) -> bool:
    """Whether this process has a controlling terminal it can open for reading and writing."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def permission_policy(mode_name: str | None) -> PermissionPolicy:
    """The policy for ``--permission`` (None: the default, ask on a terminal, else deny)."""
    if mode_name is None:
        mode_name = "ask" if terminal_available() else "deny"
    mode = PermissionMode(mode_name)
    if mode is not PermissionMode.ASK:
        return PermissionPolicy(mode)
    if not terminal_available():
        _say(
            "--permission ask: there is no terminal to ask on, so every permission request "
            "will be denied (use --permission allow-reads or allow-all to decide up front)"
        )
        return PermissionPolicy(PermissionMode.DENY)
    return PermissionPolicy(PermissionMode.ASK, ask=TerminalAsker().ask)


class TerminalAsker:
    """Asks one question at a time (the lock): two sessions never interleave prompts."""

    def __init__(self, path: str = TTY_PATH) -> None:
        self._path = path
        self._lock = anyio.Lock()

    async def ask(self, request: Any) -> str | None:
        """The chosen option id, or None (empty answer, no terminal, cancelled, or three
        answers that were none of the choices)."""
        options = list(request.options)
        title = request.tool_call.title or "a tool call"
        lines = [f"\nacp-bridge: the agent asks permission for: {title}"]
        lines += [f"  {i}) {option.name} [{option.kind}]" for i, option in enumerate(options, 1)]
        question = (
            "\n".join(lines) + "\nchoose a number, or y (allow once), a (always), n (reject); "
            "empty: cancel: "
        )
        async with self._lock:
            for _attempt in range(_ASKS):
                answer = await self._ask_once(question)
                if not answer:
                    return None
                chosen = _chosen(answer, options)
                if chosen is not None:
                    return chosen
                question = f"acp-bridge: {answer!r} is not one of the choices; again: "
        return None

    async def _ask_once(self, question: str) -> str | None:
        abandoned = threading.Event()
        try:
            return await anyio.to_thread.run_sync(
                self._ask_blocking, question, abandoned, abandon_on_cancel=True
            )
        finally:
            abandoned.set()  # the thread stops polling within _POLL_S

    def _ask_blocking(self, question: str, abandoned: threading.Event) -> str | None:
        try:
            with open(self._path, "w", encoding="utf-8") as out, open(self._path, "rb") as tty:
                out.write(question)
                out.flush()
                answer = b""
                while not abandoned.is_set() and len(answer) < _MAX_ANSWER_BYTES:
                    ready, _, _ = select.select([tty], [], [], _POLL_S)
                    if not ready:
                        continue
                    chunk = os.read(tty.fileno(), _MAX_ANSWER_BYTES)
                    if not chunk:
                        return None  # the terminal went away
                    answer += chunk
                    if b"\n" in answer or b"\r" in answer:
                        return answer.splitlines()[0].decode("utf-8", "replace").strip()
                return None
        except OSError:
            return None


def _chosen(answer: str, options: list[Any]) -> str | None:
    """The option id an answer names: its number, or y/a/n by the option's kind."""
    if answer.isdigit():
        index = int(answer)
        return str(options[index - 1].option_id) if 1 <= index <= len(options) else None
    kinds = _LETTER_KINDS.get(answer.lower())
    if kinds is None:
        return None
    for kind in kinds:
        for option in options:
            if str(option.kind) == kind:
                return str(option.option_id)
    return None


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)
