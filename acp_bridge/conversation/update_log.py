"""Every update of a turn in the event log, soon after it happened (issue 22).

A turn's updates (the agent's ``session/update`` params, as ``update`` entries with the
message's seq) join the turn's pending log batch (:mod:`.turn_events`) like its tool calls and
permission decisions. The batch is not left for the turn's final commit: :class:`SoonFlusher`
commits whatever is pending as soon as the conversation's task gets to it, through the group
commit, so entries arriving while one batch commits form the next one. Readers of the log (the
conversation host's clients, ``_acp_bridge/watch``) therefore follow a running turn with the
delay of one commit, and a ``session/load`` replays every update, in order.

Order: everything the conversation writes to the log goes through its one
:class:`~.group_commit.GroupCommit`, in submission order; an event committed on its own (a
lifecycle event, the session) first submits the pending batch (see
:meth:`~.conversation.Conversation._log_event`), so the log's order is the order the events
happened.

Bound: the pending batch is :data:`~.journal.LOG_BATCH` entries; at the bound the turn writes it
itself before it reads on (backpressure). A crash of the bridge loses at most the pending
batch, never shown to a log reader (they read committed entries only).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import anyio

from acp_bridge.errors import QueueStoreError

__all__ = ["SoonFlusher"]

log = logging.getLogger(__name__)


class SoonFlusher:
    """Runs ``flush`` once after any number of :meth:`ring` calls made while it was not
    running (one pending ring is enough: the flush takes everything pending)."""

    def __init__(self, flush: Callable[[], Awaitable[None]], *, name: str) -> None:
        self._flush = flush
        self._name = name
        self._bell, self._rung = anyio.create_memory_object_stream[None](1)

    def ring(self) -> None:
        closed = (anyio.BrokenResourceError, anyio.ClosedResourceError)
        with contextlib.suppress(anyio.WouldBlock, *closed):
            self._bell.send_nowait(None)

    async def run(self) -> None:
        """Flush after each ring until :meth:`close` (run it as a task of the conversation)."""
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
            async for _ in self._rung:
                try:
                    await self._flush()
                except QueueStoreError as exc:  # the turn's final commit reports it too
                    log.warning("%s: could not log the turn's updates: %s", self._name, exc)

    def close(self) -> None:
        self._bell.close()
        self._rung.close()
