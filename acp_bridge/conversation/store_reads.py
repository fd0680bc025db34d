"""The read-only queries of the queue store's messages: the next queued message, the queue, the
messages by state, one message, and the queue as a conversation reopening needs it. None of them
writes. See :mod:`.store` for the whole story."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acp_bridge.conversation.queue_states import MessageRecord, MessageState
from acp_bridge.conversation.records import (
    StoredMessage,
    loads,
    message_from_row,
    record_from_row,
)
from acp_bridge.conversation.store_connection import StoreConnection
from acp_bridge.conversation.store_rows import StoredRows

__all__ = ["QueueReads"]


class QueueReads:
    """Reading the queue and its messages (changing them is
    :class:`~.store_writes.QueueWrites`')."""

    def __init__(self, connection: StoreConnection, rows: StoredRows) -> None:
        self._connection = connection
        self._rows = rows

    def next_queued(self, conversation_id: str) -> StoredMessage | None:
        """The queued message with the lowest position, or None: an index lookup, never a scan."""
        with self._connection.transaction("find the next queued message", write=False) as db:
            row = db.execute(
                "SELECT * FROM messages INDEXED BY messages_queue"
                " WHERE conversation_id = ? AND state = 'queued' ORDER BY position LIMIT 1",
                (conversation_id,),
            ).fetchone()
            if row is None:
                self._rows.require(db, conversation_id)
                return None
            return self._rows.decode(message_from_row, row)

    def queued(self, conversation_id: str) -> list[StoredMessage]:
        """Every queued message in prompt order (a restarted bridge rebuilds its queue from it)."""
        with self._connection.transaction("list the queue", write=False) as db:
            self._rows.require(db, conversation_id)
            rows = db.execute(
                "SELECT * FROM messages INDEXED BY messages_queue"
                " WHERE conversation_id = ? AND state = 'queued' ORDER BY position",
                (conversation_id,),
            )
            return [self._rows.decode(message_from_row, row) for row in rows.fetchall()]

    def messages(
        self, conversation_id: str, states: Iterable[MessageState | str] | None = None
    ) -> list[StoredMessage]:
        """The conversation's messages in seq (creation) order, optionally only some states."""
        wanted = None if states is None else sorted({MessageState(s).value for s in states})
        query = "SELECT * FROM messages WHERE conversation_id = ?"
        if wanted is not None:
            query += f" AND state IN ({', '.join('?' * len(wanted))})"
        with self._connection.transaction("list messages", write=False) as db:
            self._rows.require(db, conversation_id)
            rows = db.execute(query + " ORDER BY seq", (conversation_id, *(wanted or ())))
            return [self._rows.decode(message_from_row, row) for row in rows.fetchall()]

    def queue_state(self, conversation_id: str) -> tuple[list[MessageRecord], dict[int, list[Any]]]:
        """What resuming a conversation's queue needs, and only that: every message as the
        queue machine sees it, in prompt order (finished and running ones by seq, then the
        queued ones by position), and the content of the queued ones by seq.

        Replies and the content of finished messages are never read, so opening a long
        conversation costs memory in proportion to its queue, not to its history.
        """
        with self._connection.transaction("read the queue", write=False) as db:
            self._rows.require(db, conversation_id)
            rows = db.execute(
                "SELECT seq, position, state, stop_reason, error, recoverable, attempts,"
                " CASE WHEN state = 'queued' THEN content END AS content"
                " FROM messages WHERE conversation_id = ? ORDER BY seq",
                (conversation_id,),
            ).fetchall()
            history: list[MessageRecord] = []
            queued: list[tuple[int, MessageRecord]] = []
            prompts: dict[int, list[Any]] = {}
            for row in rows:
                record = self._rows.decode(record_from_row, row)
                if record.state is MessageState.QUEUED:
                    queued.append((row["position"], record))
                    prompts[record.seq] = self._rows.decode(
                        lambda r: loads(r["content"], list), row
                    )
                else:
                    history.append(record)
            queued.sort(key=lambda item: item[0])
            return history + [record for _, record in queued], prompts

    def get_message(self, conversation_id: str, seq: int) -> StoredMessage | None:
        with self._connection.transaction("read a message", write=False) as db:
            message = self._rows.message(db, conversation_id, seq)
            if message is None:
                self._rows.require(db, conversation_id)
            return message
