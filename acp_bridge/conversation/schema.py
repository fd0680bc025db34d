"""What the queue store keeps: message states, the records read back, their JSON columns, and the
SQLite schema as an ordered list of migrations.

The schema version is ``PRAGMA user_version``: the number of migrations applied. Opening a store
runs :func:`migrate`, which applies the missing ones in order, all in one write transaction, so a
crash or an error part-way leaves the file at its old version. A migration, once released, is never
edited: a change to the schema is a new migration at the end of :data:`MIGRATIONS`.

``PRAGMA application_id`` marks the file as ours, so that ``--store`` pointed at some other SQLite
database is refused instead of being filled with our tables.

History:

1. conversations, messages (seq, content, state, timestamps, outcome) and the event log.
2. Queue order apart from creation order: ``messages.position`` (an interrupt or a retry goes ahead
   of older queued messages while ``seq`` stays the creation order) and ``messages.attempts``.
   Existing messages keep their seq order; messages that had started count one attempt. The
   partial index ``messages_queue`` holds only queued messages, so finding the next one is an
   index lookup whose cost does not grow with history, and it makes queued positions unique.
   ``messages_running`` allows at most one running message per conversation.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from acp_bridge.conversation.queue_model import MessageRecord, MessageState
from acp_bridge.errors import QueueStoreError

__all__ = [
    "APPLICATION_ID",
    "LATEST_VERSION",
    "MIGRATIONS",
    "ConversationRecord",
    "EventRecord",
    "MessageState",
    "Migration",
    "StoredMessage",
    "connect",
    "conversation_from_row",
    "dumps",
    "event_from_row",
    "loads",
    "message_from_row",
    "migrate",
    "version_of",
]

_J = TypeVar("_J", dict[str, Any], list[Any])

# "ACPB" in ASCII: identifies an acp-bridge queue store in the SQLite header.
APPLICATION_ID: Final = 0x41435042


@dataclass(frozen=True)
class ConversationRecord:
    """A stored conversation: what to run, where, and the session it last had.

    ``agent`` is the agent spec as JSON (name, argv, env changes, cwd); ``config`` holds the
    config options and mode chosen; ``paused`` is set by a stop until resume or a new send.
    """

    id: str
    agent: dict[str, Any]
    cwd: str
    session_id: str | None
    mcp_servers: list[Any]
    additional_directories: list[Any]
    config: dict[str, Any]
    paused: bool
    title: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class StoredMessage:
    """A stored message: the queue's :class:`~.queue_model.MessageRecord` (see
    :meth:`record`) plus what only the store keeps. ``seq`` is its creation order;
    ``position`` its place in the queue (lowest first, meaningful among queued messages);
    ``attempts`` counts its starts. ``content`` holds ACP content blocks; ``error`` is
    ``{code, message, details}``.
    """

    conversation_id: str
    seq: int
    position: int
    content: list[Any]
    state: MessageState
    stop_reason: str | None
    error: dict[str, Any] | None
    recoverable: bool | None
    attempts: int
    created_at: float
    started_at: float | None
    finished_at: float | None

    @property
    def is_final(self) -> bool:
        return self.state.is_final

    def record(self) -> MessageRecord:
        """The message as the queue machine sees it (attempts count from 1 there)."""
        failed = self.state is MessageState.FAILED
        message = (self.error or {}).get("message")
        return MessageRecord(
            seq=self.seq,
            state=self.state,
            attempt=max(1, self.attempts),
            stop_reason=self.stop_reason,
            error=str(message or "failed") if failed else None,
            recoverable=bool(self.recoverable) if failed else None,
        )


@dataclass(frozen=True)
class EventRecord:
    """One entry of a conversation's turn log; ``id`` increases across the whole store."""

    id: int
    conversation_id: str
    ts: float
    seq: int | None
    kind: str
    data: Any


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def loads(text: str, kind: type[_J]) -> _J:
    value = json.loads(text)
    if not isinstance(value, kind):
        raise ValueError(f"expected a JSON {kind.__name__}, found {type(value).__name__}")
    return value


def conversation_from_row(row: sqlite3.Row) -> ConversationRecord:
    return ConversationRecord(
        id=row["id"],
        agent=loads(row["agent"], dict),
        cwd=row["cwd"],
        session_id=row["session_id"],
        mcp_servers=loads(row["mcp_servers"], list),
        additional_directories=loads(row["additional_directories"], list),
        config=loads(row["config"], dict),
        paused=bool(row["paused"]),
        title=row["title"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def message_from_row(row: sqlite3.Row) -> StoredMessage:
    error, recoverable = row["error"], row["recoverable"]
    return StoredMessage(
        conversation_id=row["conversation_id"],
        seq=row["seq"],
        position=row["position"],
        content=loads(row["content"], list),
        state=MessageState(row["state"]),
        stop_reason=row["stop_reason"],
        error=None if error is None else loads(error, dict),
        recoverable=None if recoverable is None else bool(recoverable),
        attempts=row["attempts"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def event_from_row(row: sqlite3.Row) -> EventRecord:
    return EventRecord(
        id=row["id"],
        conversation_id=row["conversation_id"],
        ts=row["ts"],
        seq=row["seq"],
        kind=row["kind"],
        data=json.loads(row["data"]),
    )


@dataclass(frozen=True)
class Migration:
    """One schema step: the statements that take the file from ``version - 1`` to ``version``."""

    version: int
    summary: str
    statements: tuple[str, ...]


_V1 = Migration(
    1,
    "conversations, messages and the event log",
    (
        f"PRAGMA application_id = {APPLICATION_ID}",
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            agent TEXT NOT NULL,
            cwd TEXT NOT NULL,
            session_id TEXT,
            mcp_servers TEXT NOT NULL DEFAULT '[]',
            additional_directories TEXT NOT NULL DEFAULT '[]',
            config TEXT NOT NULL DEFAULT '{}',
            paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
            title TEXT
        )""",
        "CREATE INDEX conversations_by_update ON conversations (updated_at)",
        """CREATE TABLE messages (
            conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL CHECK (seq > 0),
            content TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN
                ('queued', 'running', 'done', 'cancelled', 'superseded', 'failed')),
            stop_reason TEXT,
            error TEXT,
            recoverable INTEGER CHECK (recoverable IN (0, 1)),
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL,
            PRIMARY KEY (conversation_id, seq)
        )""",
        "CREATE INDEX messages_by_state ON messages (conversation_id, state, seq)",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            ts REAL NOT NULL,
            seq INTEGER,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            FOREIGN KEY (conversation_id, seq) REFERENCES messages (conversation_id, seq)
        )""",
        "CREATE INDEX events_by_conversation ON events (conversation_id, id)",
    ),
)

_V2 = Migration(
    2,
    "queue position apart from creation order, attempts, one running message per conversation",
    (
        "ALTER TABLE messages ADD COLUMN position INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE messages ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
        "UPDATE messages SET position = seq, attempts = (started_at IS NOT NULL)",
        "DROP INDEX messages_by_state",
        """CREATE UNIQUE INDEX messages_queue ON messages (conversation_id, position)
            WHERE state = 'queued'""",
        """CREATE UNIQUE INDEX messages_running ON messages (conversation_id)
            WHERE state = 'running'""",
        "CREATE INDEX messages_by_position ON messages (conversation_id, position)",
    ),
)

MIGRATIONS: Final[tuple[Migration, ...]] = (_V1, _V2)
LATEST_VERSION: Final = len(MIGRATIONS)


def connect(path: str, *, busy_timeout_s: float) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode, WAL, ``synchronous=FULL``, foreign keys on; migrate it.

    The connection may be used from any thread (the caller serialises access).

    Raises:
        QueueStoreError: the file cannot be opened, is not an SQLite database (corrupt or
            truncated), is not an acp-bridge store, or was written by a newer acp-bridge.
    """
    try:
        conn = sqlite3.connect(
            path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise QueueStoreError(f"cannot open the queue store {path}: {exc}") from exc
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal" and path != ":memory:":
            raise QueueStoreError(f"{path}: cannot use WAL mode (journal_mode is {mode})")
        # FULL: in WAL mode a commit is fsynced before it returns, so it survives power loss too.
        conn.execute("PRAGMA synchronous = FULL")
        migrate(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise QueueStoreError(f"{path} is not a readable acp-bridge queue store: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def version_of(conn: sqlite3.Connection) -> int:
    """The schema version recorded in the file (0 for a new, empty one)."""
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def migrate(
    conn: sqlite3.Connection, path: str, migrations: tuple[Migration, ...] = MIGRATIONS
) -> int:
    """Bring the file up to ``len(migrations)`` in one write transaction; return that version.

    ``conn`` must be in autocommit mode (``isolation_level=None``) and outside a transaction.

    Raises:
        QueueStoreError: the file belongs to another application, or was written by a newer
            acp-bridge than this one (its schema version is above ``len(migrations)``).
        sqlite3.Error: the file could not be read or written; the caller translates it.
    """
    latest = len(migrations)
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = _check_ownership(conn, path, latest)
        for migration in migrations[current:]:
            for statement in migration.statements:
                conn.execute(statement)
            # PRAGMA takes no parameters; the version is our own integer.
            conn.execute(f"PRAGMA user_version = {int(migration.version)}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return latest


def _check_ownership(conn: sqlite3.Connection, path: str, latest: int) -> int:
    application_id: int = conn.execute("PRAGMA application_id").fetchone()[0]
    version = version_of(conn)
    if application_id not in (0, APPLICATION_ID):
        raise QueueStoreError(
            f"{path} is not an acp-bridge queue store (application_id {application_id:#x})"
        )
    if version > latest:
        raise QueueStoreError(
            f"{path} was written by a newer acp-bridge (store schema version {version}; this "
            f"version knows up to {latest}); upgrade acp-bridge or use another --store"
        )
    if version == 0 and _has_tables(conn):
        raise QueueStoreError(
            f"{path} is an SQLite database but not an acp-bridge queue store (it has tables "
            "and no schema version)"
        )
    return version


def _has_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' LIMIT 1"
    ).fetchone()
    return row is not None
