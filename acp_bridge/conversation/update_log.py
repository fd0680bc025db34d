"""Every update of a turn in the event log, soon after it happened (issue 22).

A turn's updates (the agent's ``session/update`` params, as ``update`` entries with the
message's seq) join the turn's pending log batch (:mod:`.turn_events`) like its tool calls and
permission decisions. The batch is not left for the turn's final commit: :class:`SoonFlusher`
commits whatever is pending as soon as the conversation's task gets to it, through the group
commit, so entries arriving while one batch commits form the next one. It flushes at most once
per :data:`FLUSH_INTERVAL_S` (20 ms): the first update after a quiet spell is committed at
once, the ones arriving within 20 ms of the last flush wait for the next. A real agent
streaming hundreds of chunks a second then costs one commit (and one delivery to the host's
clients) per 20 ms, not one per chunk: measured, the host's CPU per chunk at 500 chunks a
second falls by about half (docs/benchmarks.md). Readers of the log (the conversation host's
clients, ``_acp_bridge/watch``) therefore follow a running turn at most 20 ms and one commit
behind, and a ``session/load`` replays every update, in order. Whoever needs everything so far
(a question to the host's clients about a tool call, a turn's end, a lifecycle event) flushes
at once, without waiting.

Order: everything the conversation writes to the log goes through its one
:class:`~.group_commit.GroupCommit`, in submission order; an event committed on its own (a
lifecycle event, the session) first submits the pending batch (see
:meth:`~.conversation.Conversation._log_event`), so the log's order is the order the events
happened.

Bound: the pending batch is :data:`~.journal.LOG_BATCH` entries; at the bound the turn writes it
itself before it reads on (backpressure), whatever the interval. A crash of the bridge loses at
most the pending batch (at most 20 ms of updates, or ``LOG_BATCH`` entries), never shown to a
log reader (they read committed entries only), and the turn ends failed and recoverable.

Following the log without reading it back: a reader in this process (the conversation host's
tail) gets what the group commit just committed from :class:`CommittedLog`, in memory, in
commit order, with the ids the store gave, rather than reading it again from the store and
decoding its JSON. Only the entries the conversation appends itself are known this way
(``add_events``, ``add_event``); any other store call of the conversation (a turn's start and
end, a steer, ...) may write the log too, and then the reader is told to read the store. In both
stores only the conversation's owner writes its log (SQLite: the owner lock; PostgreSQL: every
insert is fenced by the owner's lease), and the owner's writes all go through its group commit:
so what the reader is handed, after what it read, is the log's continuation, no gap.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import anyio

from acp_bridge.conversation.records import EventRecord
from acp_bridge.errors import QueueStoreError

__all__ = ["COMMITTED_KEPT", "FLUSH_INTERVAL_S", "CommittedLog", "SoonFlusher"]

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S: Final = 0.02
"""A conversation's pending updates are committed at most once per this many seconds."""

COMMITTED_KEPT: Final = 4096
"""Committed entries kept for a reader that has not taken them; past it they are dropped and
the reader reads the store instead."""


class CommittedLog:
    """The entries a conversation's group commit committed to its event log since the reader
    last took them (see the module's text). Nothing is kept until a reader :meth:`follow` s."""

    def __init__(self) -> None:
        self._following = False
        self._entries: list[EventRecord] = []
        self._unknown = True
        """Something may have been committed that is not in ``_entries`` (or nothing was
        taken yet): the reader must read the store."""

    def follow(self) -> None:
        """Start keeping entries; the first :meth:`take` says to read the store."""
        self._following = True
        self._entries = []
        self._unknown = True

    def committed(self, entries: Sequence[EventRecord] | None) -> None:
        """A store call committed these entries (None: the call may have written to the log,
        but what is not known)."""
        if not self._following:
            return
        if entries is None or len(self._entries) + len(entries) > COMMITTED_KEPT:
            self._entries = []
            self._unknown = True
        elif not self._unknown:
            self._entries.extend(entries)

    def take(self) -> list[EventRecord] | None:
        """The entries committed since the last take, in log order; None when the reader must
        read the store instead (from where it is: everything committed is there)."""
        entries, unknown = self._entries, self._unknown
        self._entries, self._unknown = [], False
        return None if unknown else entries

    def read_again(self) -> None:
        """The reader read the store and may not have reached its end: read it again."""
        self._entries = []
        self._unknown = True


class SoonFlusher:
    """Runs ``flush`` once after any number of :meth:`ring` calls made while it was not
    running (one pending ring is enough: the flush takes everything pending), at most once per
    ``interval_s`` (the first ring after a quiet spell at once)."""

    def __init__(
        self,
        flush: Callable[[], Awaitable[None]],
        *,
        name: str,
        interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._flush = flush
        self._name = name
        self._interval_s = interval_s
        self._bell, self._rung = anyio.create_memory_object_stream[None](1)
        self._rung_already = False
        """A ring is waiting for the flush: the next ones (one per update) cost nothing."""
        self._closed = anyio.Event()

    def ring(self) -> None:
        if self._rung_already:
            return
        self._rung_already = True
        closed = (anyio.BrokenResourceError, anyio.ClosedResourceError)
        with contextlib.suppress(anyio.WouldBlock, *closed):
            self._bell.send_nowait(None)

    async def run(self) -> None:
        """Flush after each ring until :meth:`close` (run it as a task of the conversation).
        Closed while waiting out the interval, it returns without flushing: the turn's final
        commit takes what is pending."""
        last = -math.inf
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
            async for _ in self._rung:
                wait = last + self._interval_s - anyio.current_time()
                if wait > 0:
                    with anyio.move_on_after(wait):
                        await self._closed.wait()
                    if self._closed.is_set():
                        return
                self._rung_already = False  # a ring from now on is for the next flush
                last = anyio.current_time()
                try:
                    await self._flush()
                except QueueStoreError as exc:  # the turn's final commit reports it too
                    log.debug("%s: the turn's updates were not logged: %s", self._name, exc)

    def close(self) -> None:
        self._closed.set()
        self._bell.close()
        self._rung.close()
