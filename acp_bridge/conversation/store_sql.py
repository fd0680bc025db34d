"""The queue store's SQL, one statement group per function, each run inside a transaction the
:class:`~.store.QueueStore` holds (``db``). No locking and no error translation here: the
store does both, once."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from acp_bridge.conversation.records import dumps

__all__ = [
    "JSON_FIELDS",
    "as_list",
    "delete_conversation",
    "encode_change",
    "insert_event",
    "queue_position",
    "state_counts",
    "touch",
]

JSON_FIELDS: Final = frozenset({"config", "mcp_servers", "additional_directories"})


def queue_position(db: sqlite3.Connection, conversation_id: str, *, next: bool) -> int:
    """Where a message joins the queue: after every message, or ahead of every queued one."""
    if next:
        head = db.execute(
            "SELECT MIN(position) FROM messages INDEXED BY messages_queue"
            " WHERE conversation_id = ? AND state = 'queued'",
            (conversation_id,),
        ).fetchone()[0]
        if head is not None:
            return int(head) - 1
    tail = db.execute(
        "SELECT COALESCE(MAX(position), 0) FROM messages WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()[0]
    return int(tail) + 1


def touch(
    db: sqlite3.Connection, conversation_id: str, now: float, *, unpause: bool = False
) -> None:
    db.execute(
        "UPDATE conversations SET updated_at = MAX(updated_at, ?)"
        + (", paused = 0" if unpause else "")
        + " WHERE id = ?",
        (now, conversation_id),
    )


def encode_change(name: str, value: Any) -> Any:
    if name in JSON_FIELDS:
        return dumps(dict(value) if name == "config" else as_list(value))
    return int(value) if name == "paused" else value


def as_list(value: Sequence[Any]) -> list[Any]:
    if isinstance(value, str | bytes):  # a Sequence, but never what the caller meant
        raise TypeError(f"expected a list, not {type(value).__name__} {value!r:.40}")
    return list(value)


def insert_event(
    db: sqlite3.Connection,
    conversation_id: str,
    event: tuple[str, Any],
    seq: int | None,
    now: float,
    *,
    body: str | None = None,
) -> int:
    kind, data = event
    cursor = db.execute(
        "INSERT INTO events (conversation_id, ts, seq, kind, data) VALUES (?, ?, ?, ?, ?)",
        (conversation_id, now, seq, kind, dumps(data) if body is None else body),
    )
    event_id = cursor.lastrowid
    assert event_id is not None  # an INSERT into a rowid table always sets it
    return event_id


def state_counts(db: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """For every conversation with messages: how many are in each state."""
    counts: dict[str, dict[str, int]] = {}
    rows = db.execute(
        "SELECT conversation_id, state, COUNT(*) FROM messages GROUP BY conversation_id, state"
    )
    for conversation_id, state, count in rows:
        counts.setdefault(conversation_id, {})[state] = count
    return counts


def delete_conversation(db: sqlite3.Connection, conversation_id: str) -> bool:
    """Delete a conversation with its messages and events; False if there was none."""
    # Events first: they reference messages, and the cascade order is SQLite's to choose.
    db.execute("DELETE FROM events WHERE conversation_id = ?", (conversation_id,))
    db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))
    cursor = db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
    return cursor.rowcount > 0
