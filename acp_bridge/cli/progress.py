"""A progress line on stderr while the agent starts, on a terminal only.

Agents launched through ``npx`` or ``uvx`` can take many seconds before they answer
``initialize``; a silent wait looks like a hang. After a second, a terminal shows
"starting NAME... 3 s (gives up at 30 s)", rewritten in place each second and erased once the
agent is ready or has failed. Pipes and files never see it.
"""

from __future__ import annotations

import sys
from typing import Final, TextIO

import anyio

__all__ = ["StartupProgress"]

_FIRST_AFTER_S: Final = 1.0


class StartupProgress:
    def __init__(self, name: str, timeout_s: float, stream: TextIO | None = None) -> None:
        self._name = name
        self._timeout_s = timeout_s
        self._stream = stream or sys.stderr
        self._finished = anyio.Event()
        self._shown = False

    async def run(self) -> None:
        """Show the line until :meth:`finish` (returns at once off a terminal)."""
        if not self._stream.isatty():
            return
        started = anyio.current_time()
        with anyio.move_on_after(_FIRST_AFTER_S):
            await self._finished.wait()
        while not self._finished.is_set():
            waited = anyio.current_time() - started
            if waited >= self._timeout_s:
                self._stream.write(
                    f"\racp-bridge: {self._name} did not start within {self._timeout_s:g} s; "
                    "stopping it\x1b[K"
                )
                self._stream.flush()
                self._shown = True
                await self._finished.wait()
                return
            self._stream.write(
                f"\racp-bridge: starting {self._name}... {waited:.0f} s "
                f"(gives up at {self._timeout_s:g} s)\x1b[K"
            )
            self._stream.flush()
            self._shown = True
            with anyio.move_on_after(1.0):
                await self._finished.wait()

    def finish(self) -> None:
        """The agent is ready, or failed: erase the line before anything else is printed."""
        if self._finished.is_set():
            return
        self._finished.set()
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
