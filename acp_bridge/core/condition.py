"""One condition that waiters re-check after every change of a state machine.

A waiter checks its predicate against the machine, and only if it does not hold registers and
waits; :meth:`Condition.notify_all` wakes every registered waiter to check again. The check
and the registration happen with no await in between, so no change can fall between them (the
lost wake-up a hand-swapped ``anyio.Event`` invites). Every waiter since the last notify shares
one event, made when the first of them waits: a notify with nobody waiting costs one attribute
check, so a condition can sit on a hot path (a turn notifies once per update).
"""

from __future__ import annotations

import anyio

__all__ = ["Condition"]


class Condition:
    __slots__ = ("_waiting", "_woken")

    def __init__(self) -> None:
        self._woken: anyio.Event | None = None
        self._waiting = 0

    def __repr__(self) -> str:
        return f"<Condition [{self._waiting} waiting]>"

    async def wait(self) -> None:
        """Wait for the next :meth:`notify_all` (re-check the predicate after it)."""
        woken = self._woken
        if woken is None:
            woken = self._woken = anyio.Event()
        self._waiting += 1
        try:
            await woken.wait()
        finally:
            self._waiting -= 1

    def notify_all(self) -> None:
        woken = self._woken
        if woken is not None:
            self._woken = None
            woken.set()
