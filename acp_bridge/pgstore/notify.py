"""LISTEN/NOTIFY: how the owner of a conversation learns, within milliseconds and without
polling, that a message was sent to it through any host, and how a watcher on another host
learns that the event log grew.

Four channels, the conversation id as the payload:

- :data:`QUEUE_CHANNEL`: a message was added (:meth:`.queue.PgQueue.add_message` notifies in its
  own transaction, so the notification is delivered when, and only if, the message is
  committed);
- :data:`EVENTS_CHANNEL`: events were appended to the conversation's log;
- :data:`CONTROL_CHANNEL`: someone on another host asks the owner to cancel the running turn or
  to stop (``acp-bridge cancel`` or ``stop`` with no owner reachable where it runs): a row of
  the ``control`` table was committed (:mod:`.control`);
- :data:`CONTROL_ANSWER_CHANNEL`: the owner answered such a request (the verb that asked waits
  for it).

A notification is a hint, never the truth: the tables are. Notifications sent while a listener
was not connected are lost, so whoever (re)starts listening reads the queue once afterwards
(``next_queued``), and a listener's failure (its connection lost) is raised to its caller, who
reconnects and reads again.

:class:`Listener` holds one connection of its own in one worker thread (psycopg is synchronous,
so this runs the same on asyncio and trio). The thread waits (a selector) on the connection's
socket and on a pipe of its own; a notification is read with ``notifies(timeout=0)`` and handed
to ``on_notify`` on the event loop's thread (``anyio.from_thread``). Stopping writes a byte into
the pipe, which wakes the thread at once.

Shutdown sequence of :meth:`Listener.run`: cancelled, a task of its own writes the stop byte;
the worker thread (never abandoned) sees it and returns at once; then the pipe and the
connection are closed. A lost connection ends the thread with the error, raised by ``run``,
or, given ``on_reconnected``, the connection is opened again (within a bound) and
``on_reconnected`` told, so its caller reads what it may have missed.
"""

from __future__ import annotations

import os
import selectors
from collections.abc import Callable, Sequence
from typing import Any, Final

import anyio
import psycopg
from anyio.abc import TaskStatus
from psycopg import sql

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import Cursor, connect, translate
from acp_bridge.pgstore.retry import RECONNECT_BOUND_S
from acp_bridge.record import record

__all__ = [
    "CONTROL_ANSWER_CHANNEL",
    "CONTROL_CHANNEL",
    "EVENTS_CHANNEL",
    "QUEUE_CHANNEL",
    "Listener",
    "Notification",
    "notify_queue",
]

_FIRST_DELAY_S: Final = 0.05
_MAX_DELAY_S: Final = 1.0

QUEUE_CHANNEL: Final = "acp_bridge_queue"
EVENTS_CHANNEL: Final = "acp_bridge_events"
CONTROL_CHANNEL: Final = "acp_bridge_control"
CONTROL_ANSWER_CHANNEL: Final = "acp_bridge_control_answer"


@record
class Notification:
    """``channel`` said something happened to conversation ``conversation_id``."""

    channel: str
    conversation_id: str


def notify_queue(cur: Cursor, conversation_id: str) -> None:
    """In the caller's transaction: wake the conversation's owner when it commits."""
    cur.execute("SELECT pg_notify(%s, %s)", (QUEUE_CHANNEL, conversation_id))


class Listener:
    """Listens on ``channels`` of the database at ``url``; calls ``on_notify`` on the event
    loop's thread for each notification. Start with ``await tg.start(listener.run)``: it
    returns once the LISTEN is in place (so nothing committed afterwards is missed)."""

    def __init__(
        self,
        url: str,
        on_notify: Callable[[Notification], None],
        *,
        channels: Sequence[str] = (QUEUE_CHANNEL,),
        owner_tag: str = "",
        on_reconnected: Callable[[], None] | None = None,
    ) -> None:
        self._url = url
        self._on_notify = on_notify
        self._on_reconnected = on_reconnected
        self._channels = tuple(channels)
        self._owner_tag = owner_tag
        # The one thread of this listener: never a token of the shared worker-thread pool.
        self._limiter = anyio.CapacityLimiter(1)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled. With ``on_reconnected``, a lost connection is opened again
        (within :data:`~.retry.RECONNECT_BOUND_S`), and ``on_reconnected`` called once the
        LISTEN is back in place: notifications sent meanwhile are lost, so it reads what it
        may have missed.

        Raises:
            QueueStoreError: the connection could not be opened, or was lost (and, with
                ``on_reconnected``, could not be opened again within the bound).
        """
        conn = await self._open()
        task_status.started()
        while True:
            failure = await self._listen(conn)
            if failure is None:
                return
            if self._on_reconnected is None:
                raise failure
            conn = await self._reopen(failure)
            self._on_reconnected()

    async def _reopen(self, failure: QueueStoreError) -> psycopg.Connection[Any]:
        deadline = anyio.current_time() + RECONNECT_BOUND_S
        delay = _FIRST_DELAY_S
        while True:
            try:
                return await self._open()
            except QueueStoreError as exc:
                if anyio.current_time() + delay > deadline:
                    raise failure from exc
            await anyio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY_S)

    async def _open(self) -> psycopg.Connection[Any]:
        opened: list[psycopg.Connection[Any]] = []
        try:
            await anyio.to_thread.run_sync(self._connect, opened, limiter=self._limiter)
        except BaseException:
            for conn in opened:  # cancelled while connecting: the thread finished all the same
                conn.close()
            raise
        return opened[0]

    async def _listen(self, conn: psycopg.Connection[Any]) -> QueueStoreError | None:
        """Pump ``conn``'s notifications until cancelled (None) or the connection fails (the
        error); closes it either way."""
        wake_r, wake_w = os.pipe()
        failure: QueueStoreError | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_wake_when_cancelled, wake_w)
                # Not abandoned on cancel: the cancelled waker wakes the thread, which returns.
                failure = await anyio.to_thread.run_sync(
                    self._pump, conn, wake_r, limiter=self._limiter
                )
                tg.cancel_scope.cancel()
        finally:
            os.close(wake_r)
            os.close(wake_w)
            conn.close()
        return failure

    def _connect(self, opened: list[psycopg.Connection[Any]]) -> None:
        """In a worker thread: open the connection and LISTEN on every channel."""
        conn = connect(self._url, owner_tag=self._owner_tag, purpose="listen")
        opened.append(conn)
        try:
            for channel in self._channels:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except psycopg.Error as exc:
            raise translate(exc, self._url, "listen") from exc

    def _pump(self, conn: psycopg.Connection[Any], wake_r: int) -> QueueStoreError | None:
        """In a worker thread: hand notifications over until ``wake_r`` is readable; the error
        that ended it, if the connection failed."""
        with selectors.DefaultSelector() as selector:  # any fd number, unlike select()
            selector.register(conn.fileno(), selectors.EVENT_READ)
            selector.register(wake_r, selectors.EVENT_READ)
            while True:
                try:
                    # timeout=0: what was received (or is readable) now, without waiting.
                    notes = conn.notifies(timeout=0)
                    batch = [Notification(n.channel, n.payload) for n in notes]
                except psycopg.Error as exc:
                    return translate(exc, self._url, "receive notifications")
                if batch:
                    anyio.from_thread.run_sync(self._deliver, batch)
                ready = selector.select()
                if any(key.fd == wake_r for key, _ in ready):
                    return None

    def _deliver(self, batch: list[Notification]) -> None:
        for notification in batch:
            self._on_notify(notification)


async def _wake_when_cancelled(wake_w: int) -> None:
    """Sleep until cancelled, then wake the listener's thread (the stop byte)."""
    try:
        await anyio.sleep_forever()
    finally:
        os.write(wake_w, b"x")
