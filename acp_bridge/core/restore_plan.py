"""The restore plan: which sessions a restarted agent gets back, in what order, with what budget.

After a restart every session the front-end knows is brought back on the new process before
the agent is ready again (``session/load``, else ``session/resume``). The plan is the same for
every front-end:

* **Order.** A session with a prompt waiting is restored first (its user is the one waiting);
  the others follow in the order they were opened.
* **Budget.** Each session has a budget of its own (:attr:`RestoreBudget.per_session_s`),
  counted from the moment its restore starts. No budget covers the whole restore: an agent
  that restores 1,000 sessions at 60 ms each takes its minute and is not given up on. What
  bounds the whole is the agent process itself: a restore that hangs one session ends that
  session's restore at its budget, not the others'.
* **Concurrency.** At most :attr:`RestoreBudget.concurrency` restores are in flight at once.
  The sessions with a prompt waiting are all back before any other restore is sent; the order
  among the others is not promised.
* **Outcome.** A session restores, or fails: refused by the agent, or over its budget. A failure
  never stops the other restores. The death of the process does: it ends the whole restore
  (the exception propagates) and the next generation starts over.

What a failure *means* is each front-end's policy, written here once:

* **The library replaces the session.** It opens a new session in the same cwd and reports
  :class:`~acp_bridge.client.events.SessionReplaced` (old id, new id, why). The caller holds a
  ``Session`` object whose conversation goes on: the conversation layer records the replacement
  and keeps queueing into the new id, so a durable queue is never stranded on an id the agent
  no longer knows.
* **The proxy marks the session lost.** The editor owns the session id and its thread: a session
  swapped under it would show the editor one history while the agent holds another. The
  editor's next request naming the session gets an error saying it was lost and why, and the
  editor decides (typically a ``session/new`` of its own).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

from acp_bridge.record import record

__all__ = ["RestoreBudget", "RestoreRefused", "restore_all"]

_T = TypeVar("_T")

DEFAULT_CONCURRENCY = 8


class RestoreRefused(Exception):
    """The agent refused to restore one session (the message says how)."""


@record
class RestoreBudget:
    per_session_s: float = 60.0
    """How long one session's restore may take, counted from when it starts."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Restores in flight at once."""

    def __post_init__(self) -> None:
        if not self.per_session_s > 0:
            raise ValueError(f"per_session_s must be > 0, not {self.per_session_s!r}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, not {self.concurrency!r}")


async def restore_all(
    items: Sequence[_T],
    restore_one: Callable[[_T], Awaitable[None]],
    budget: RestoreBudget,
    *,
    waiting: Callable[[_T], bool] = lambda item: False,
) -> list[tuple[_T, str]]:
    """Restore every item with ``restore_one``; the failures (item, why), as they happened.

    ``restore_one`` raises :class:`RestoreRefused` for a refusal; anything else it raises (the
    process died) cancels the other restores and propagates. ``waiting(item)``: a prompt waits
    for this one (it goes first).

    Raises:
        Exception: whatever ``restore_one`` raised other than :class:`RestoreRefused`.
    """
    first = [item for item in items if waiting(item)]
    rest = [item for item in items if not waiting(item)]
    failures: list[tuple[_T, str]] = []

    async def one(item: _T) -> None:
        with anyio.move_on_after(budget.per_session_s) as scope:
            try:
                await restore_one(item)
            except RestoreRefused as exc:
                failures.append((item, str(exc)))
                return
        if scope.cancelled_caught:
            failures.append((item, f"did not restore within {budget.per_session_s:g} s"))

    for batch in (first, rest):  # every waiting session is back before any other is sent
        if len(batch) == 1 or budget.concurrency == 1:
            for item in batch:
                await one(item)
        elif batch:
            await _bounded(batch, one, budget.concurrency)
    return failures


async def _bounded(
    items: Sequence[_T], run: Callable[[_T], Awaitable[None]], concurrency: int
) -> None:
    """``run`` every item, at most ``concurrency`` at once."""
    slots = anyio.Semaphore(concurrency)

    async def one(item: _T) -> None:
        try:
            await run(item)
        finally:
            slots.release()

    async with anyio.create_task_group() as tg:
        for item in items:
            await slots.acquire()
            tg.start_soon(one, item)
