"""Conversations and their event logs in PostgreSQL: create (any host), read, change (the owner,
fenced); append events (the owner, fenced) and read them after a cursor (anyone: a ``watch`` on
another host follows the shared log, woken through :data:`~.notify.EVENTS_CHANNEL`).

Event ids come from one identity column, so they increase across the whole store. Within one
conversation they also increase in commit order: every transaction that appends to a
conversation's log holds that conversation's row lock (:func:`~.lease.lock_conversation`), so
a reader that saw id N never later finds a new event of that conversation below N. A cursor
(the last id seen) is therefore safe to resume from, as with the SQLite store.

Records are the SQLite store's (:mod:`acp_bridge.conversation.records`), decoded by the same
functions. See :mod:`.queue` for errors and time.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from acp_bridge.conversation.records import (
    ConversationRecord,
    EventRecord,
    conversation_from_row,
    dumps,
    event_from_row,
)
from acp_bridge.conversation.store_catalog import ConversationChanges, LogEntry
from acp_bridge.conversation.store_sql import JSON_FIELDS, as_list
from acp_bridge.conversation.usage import UsageTotals
from acp_bridge.errors import QueueStoreError, UnknownConversationError, UnknownMessageError
from acp_bridge.pgstore.connection import Cursor, PgConnection
from acp_bridge.pgstore.lease import FENCE, Lease, fenced
from acp_bridge.pgstore.sql import begin_fenced, decode, insert_event

__all__ = ["PgConversations"]


class PgConversations:
    """Conversations and event logs of the store behind ``conn`` (thread-safe)."""

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self._name = conn.name

    def create_conversation(
        self,
        conversation_id: str | None = None,
        *,
        agent: Mapping[str, Any],
        cwd: str,
        mcp_servers: Sequence[Any] = (),
        additional_directories: Sequence[Any] = (),
        config: Mapping[str, Any] | None = None,
        title: str | None = None,
        now: float,
    ) -> ConversationRecord:
        """Store a new conversation (a random id when none is given).

        Raises:
            QueueStoreError: a conversation with this id already exists.
        """
        cid = uuid.uuid4().hex if conversation_id is None else conversation_id
        if not cid:
            raise ValueError("a conversation id must not be empty")
        values = {
            "id": cid, "now": now, "agent": dumps(dict(agent)), "cwd": cwd,
            "mcp": dumps(as_list(mcp_servers)), "dirs": dumps(as_list(additional_directories)),
            "config": dumps(dict(config or {})), "title": title,
        }  # fmt: skip
        with self._conn.transaction(f"create conversation {cid!r}") as cur:
            cur.execute(
                "INSERT INTO conversations (id, created_at, updated_at, agent, cwd,"
                " mcp_servers, additional_directories, config, title) VALUES (%(id)s,"
                " %(now)s, %(now)s, %(agent)s, %(cwd)s, %(mcp)s, %(dirs)s, %(config)s,"
                " %(title)s) ON CONFLICT (id) DO NOTHING RETURNING *",
                values,
            )
            row = cur.fetchone()
            if row is None:
                raise QueueStoreError(f"{self._name}: conversation {cid!r} already exists")
            return decode(self._name, conversation_from_row, row)

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        with self._conn.transaction("read a conversation") as cur:
            cur.execute("SELECT * FROM conversations WHERE id = %s", (conversation_id,))
            row = cur.fetchone()
            return None if row is None else decode(self._name, conversation_from_row, row)

    def usage(self, conversation_id: str) -> UsageTotals:
        """What every message of the conversation spent.

        Raises:
            UnknownConversationError: no such conversation.
        """
        record = self.get_conversation(conversation_id)
        if record is None:
            raise UnknownConversationError(self._name, conversation_id)
        return record.usage

    def update_conversation(
        self, lease: Lease, *, now: float, **changes: Unpack[ConversationChanges]
    ) -> ConversationRecord:
        """Change only the fields given, under the fence; return the record.

        Raises:
            LeaseLostError: the lease is lost; nothing was written.
        """
        unknown = set(changes) - set(ConversationChanges.__annotations__)
        if unknown:
            raise TypeError(f"update_conversation() got unknown fields {sorted(unknown)}")
        values = {name: _encode(name, value) for name, value in changes.items()}
        # Column names are the checked keys of ConversationChanges, never free text.
        assignments = "".join(f", {name} = %({name})s" for name in changes)
        cid = lease.conversation_id
        with self._conn.transaction(f"update conversation {cid!r}") as cur:
            begin_fenced(cur, self._name, lease)
            fenced(
                cur,
                self._name,
                lease,
                f"UPDATE conversations SET updated_at = GREATEST(updated_at, %(now)s){assignments}"
                f" WHERE id = %(cid)s AND {FENCE} RETURNING *",
                {**values, "now": now, "cid": cid},
            )
            row = cur.fetchone()
            return decode(self._name, conversation_from_row, row)

    # -- the event log ---------------------------------------------------------------------------

    def add_event(
        self, lease: Lease, kind: str, data: Any, *, seq: int | None = None, now: float
    ) -> int:
        """Append an event under the fence; return its id.

        Raises:
            UnknownMessageError: ``seq`` names no message of the conversation.
            LeaseLostError: the lease is lost; nothing was written.
        """
        cid = lease.conversation_id
        with self._conn.transaction(f"log an event of {cid!r}") as cur:
            begin_fenced(cur, self._name, lease)
            if seq is not None:
                self._require_message(cur, cid, seq)
            return insert_event(cur, self._name, lease, (kind, data), seq, now)

    def add_events(self, lease: Lease, entries: Sequence[LogEntry], *, now: float) -> list[int]:
        """Append several events in one transaction, under the fence; their ids, in order
        (the conversation's row lock orders its writers, so its ids grow in commit order)."""
        cid = lease.conversation_id
        with self._conn.transaction(f"log events of {cid!r}") as cur:
            begin_fenced(cur, self._name, lease)
            return [
                insert_event(cur, self._name, lease, (kind, data), seq, now)
                for kind, data, seq in entries
            ]

    def events(
        self, conversation_id: str, after_id: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        """Events with an id above ``after_id`` (the cursor), oldest first, at most ``limit``.

        Raises:
            UnknownConversationError: no such conversation.
        """
        with self._conn.transaction("read events") as cur:
            cur.execute(
                "SELECT * FROM events WHERE conversation_id = %s AND id > %s ORDER BY id LIMIT %s",
                (conversation_id, after_id, limit),
            )
            rows = cur.fetchall()
            if not rows:
                cur.execute("SELECT 1 FROM conversations WHERE id = %s", (conversation_id,))
                if cur.fetchone() is None:
                    raise UnknownConversationError(self._name, conversation_id)
            return [decode(self._name, event_from_row, row) for row in rows]

    def _require_message(self, cur: Cursor, conversation_id: str, seq: int) -> None:
        cur.execute(
            "SELECT 1 FROM messages WHERE conversation_id = %s AND seq = %s",
            (conversation_id, seq),
        )
        if cur.fetchone() is None:
            raise UnknownMessageError(self._name, conversation_id, seq)


def _encode(name: str, value: Any) -> Any:
    """A change as its column holds it (JSON text for the JSON fields, as the SQLite store)."""
    if name in JSON_FIELDS:
        return dumps(dict(value) if name == "config" else as_list(value))
    return value
