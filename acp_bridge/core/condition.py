"""One condition that waiters re-check after every change of a state machine.

A waiter checks its predicate against the machine, and only if it does not hold registers and
waits; :meth:`Condition.notify_all` wakes every registered waiter to check again. The check
and the registration happen with no await in between, so no change can fall between them (the
lost wake-up of a swapped ``anyio.Event``). Waiters are the tasks blocked on it: as many as
there are callers, never more.
"""

from __future__ import annotations

import contextlib

import anyio

__all__ = ["Condition"]


class Condition:
    def __init__(self) -> None:
        self._waiters: list[anyio.Event] = []

    def __repr__(self) -> str:
        return f"<Condition [{len(self._waiters)} waiting]>"

    async def wait(self) -> None:
        """Wait for the next :meth:`notify_all` (re-check the predicate after it)."""
        woken = anyio.Event()
        self._waiters.append(woken)
        try:
            await woken.wait()
        finally:
            with contextlib.suppress(ValueError):  # already taken by notify_all
                self._waiters.remove(woken)

    def notify_all(self) -> None:
        waiters, self._waiters = self._waiters, []
        for woken in waiters:
            woken.set()
