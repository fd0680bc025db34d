"""The conversations of the queue store and their event logs: create, find, list, update,
delete; append and read events. See :mod:`.store` for the whole story."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, Unpack

from acp_bridge.conversation.records import (
    ConversationRecord,
    ConversationSummary,
    EventRecord,
    conversation_from_row,
    dumps,
    event_from_row,
)
from acp_bridge.conversation.store_connection import StoreConnection
from acp_bridge.conversation.store_rows import StoredRows
from acp_bridge.conversation.store_sql import (
    as_list,
    delete_conversation,
    encode_change,
    insert_event,
    state_counts,
)
from acp_bridge.errors import QueueStoreError

__all__ = ["ConversationCatalog", "ConversationChanges", "LogEntry"]

LogEntry = tuple[str, Any, "int | None"]
"""One event log entry to write: (kind, JSON data, the message seq it belongs to or None)."""


class ConversationChanges(TypedDict, total=False):
    """The fields :meth:`ConversationCatalog.update_conversation` may change; absent ones stay
    as is."""

    session_id: str | None
    config: Mapping[str, Any]
    paused: bool
    mcp_servers: Sequence[Any]
    additional_directories: Sequence[Any]
    title: str | None


class ConversationCatalog:
    """Conversations and event logs (the queue itself is :class:`~.store_reads.QueueReads`'
    and :class:`~.store_writes.QueueWrites`')."""

    def __init__(self, connection: StoreConnection, rows: StoredRows) -> None:
        self._connection = connection
        self._rows = rows

    # -- conversations ---------------------------------------------------------------------------

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
        row = (
            cid, now, now, dumps(dict(agent)), cwd, dumps(as_list(mcp_servers)),
            dumps(as_list(additional_directories)), dumps(dict(config or {})), title,
        )  # fmt: skip
        with self._connection.transaction(f"create conversation {cid!r}") as db:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (cid,)).fetchone():
                raise QueueStoreError(
                    f"{self._connection.path}: conversation {cid!r} already exists"
                )
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at, agent, cwd, mcp_servers,"
                " additional_directories, config, title) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            return self._rows.conversation(db, cid)

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        with self._connection.transaction("read a conversation", write=False) as db:
            row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
            found = row.fetchone()
            return None if found is None else self._rows.decode(conversation_from_row, found)

    def latest_conversation(self) -> ConversationRecord | None:
        """The most recently updated conversation (ties: the one created last)."""
        conversations = self._list_conversations(limit=1)
        return conversations[0] if conversations else None

    def latest_resumable(
        self, cwd: str | None, argv: Sequence[str] | None = None
    ) -> ConversationRecord | None:
        """The most recently updated conversation in ``cwd`` (any directory when None) whose
        agent command is ``argv`` (any agent when None) and whose agent started a session (one
        that never got that far has nothing to continue)."""
        with self._connection.transaction("find a conversation to resume", write=False) as db:
            rows = db.execute(
                "SELECT * FROM conversations WHERE (? IS NULL OR cwd = ?)"
                " AND session_id IS NOT NULL ORDER BY updated_at DESC, rowid DESC",
                (cwd, cwd),
            )
            for row in rows:
                record = self._rows.decode(conversation_from_row, row)
                if argv is None or list(record.agent.get("argv") or []) == list(argv):
                    return record
            return None

    def list_conversations(self) -> list[ConversationRecord]:
        """Every conversation, most recently updated first."""
        return self._list_conversations(limit=-1)

    def conversation_summaries(self) -> list[ConversationSummary]:
        """Every conversation with its message counts by state, most recently updated first."""
        with self._connection.transaction("list conversations", write=False) as db:
            counts = state_counts(db)
            rows = db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, rowid DESC")
            return [
                ConversationSummary(record, counts.get(record.id, {}))
                for record in (self._rows.decode(conversation_from_row, row) for row in rows)
            ]

    def find_conversations(self, prefix: str) -> list[str]:
        """The ids that start with ``prefix`` (an exact id first, alone), at most 10."""
        with self._connection.transaction("find a conversation", write=False) as db:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (prefix,)).fetchone():
                return [prefix]
            rows = db.execute(
                "SELECT id FROM conversations WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 10",
                (len(prefix), prefix),
            )
            return [row[0] for row in rows]

    def delete_conversation(self, conversation_id: str) -> bool:
        """Delete a conversation, its messages and its events, in one transaction; False when
        there was none. The caller makes sure no process is driving it (see host/owner.py)."""
        with self._connection.transaction(f"delete conversation {conversation_id!r}") as db:
            return delete_conversation(db, conversation_id)

    def update_conversation(
        self, conversation_id: str, *, now: float, **changes: Unpack[ConversationChanges]
    ) -> ConversationRecord:
        """Change only the fields given (see :class:`ConversationChanges`); return the record."""
        unknown = set(changes) - set(ConversationChanges.__annotations__)
        if unknown:
            raise TypeError(f"update_conversation() got unknown fields {sorted(unknown)}")
        values = [encode_change(name, value) for name, value in changes.items()]
        # Column names are the checked keys of ConversationChanges, never free text.
        assignments = "".join(f", {name} = ?" for name in changes)
        with self._connection.transaction(f"update conversation {conversation_id!r}") as db:
            self._rows.require(db, conversation_id)
            db.execute(
                f"UPDATE conversations SET updated_at = MAX(updated_at, ?){assignments}"
                " WHERE id = ?",
                (now, *values, conversation_id),
            )
            return self._rows.conversation(db, conversation_id)

    def _list_conversations(self, *, limit: int) -> list[ConversationRecord]:
        with self._connection.transaction("list conversations", write=False) as db:
            rows = db.execute(
                "SELECT * FROM conversations ORDER BY updated_at DESC, rowid DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [self._rows.decode(conversation_from_row, row) for row in rows]

    # -- the event log ---------------------------------------------------------------------------

    def add_event(
        self, conversation_id: str, kind: str, data: Any, *, seq: int | None = None, now: float
    ) -> int:
        """Append an event (``data`` is any JSON value); return its id (increasing)."""
        body = dumps(data)
        with self._connection.transaction(f"log an event of {conversation_id!r}") as db:
            if seq is None:
                self._rows.require(db, conversation_id)
            else:
                self._rows.state(db, conversation_id, seq)  # raises if there is no such message
            return insert_event(db, conversation_id, (kind, data), seq, now, body=body)

    def add_events(
        self, conversation_id: str, entries: Sequence[LogEntry], *, now: float
    ) -> list[int]:
        """Append several events in one transaction (one commit, one fsync); their ids."""
        with self._connection.transaction(f"log events of {conversation_id!r}") as db:
            self._rows.require(db, conversation_id)
            return [
                insert_event(db, conversation_id, (kind, data), seq, now)
                for kind, data, seq in entries
            ]

    def last_event_id(self, conversation_id: str) -> int:
        """The id of the conversation's latest event, 0 if none (an index lookup)."""
        with self._connection.transaction("read the last event", write=False) as db:
            row = db.execute(
                "SELECT MAX(id) FROM events WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
            return int(row[0] or 0)

    def events(
        self, conversation_id: str, after_id: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        """Events with an id above ``after_id``, oldest first, at most ``limit`` of them."""
        with self._connection.transaction("read events", write=False) as db:
            rows = db.execute(
                "SELECT * FROM events WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT ?",
                (conversation_id, after_id, -1 if limit is None else limit),
            ).fetchall()
            if not rows:
                self._rows.require(db, conversation_id)
            return [self._rows.decode(event_from_row, row) for row in rows]
