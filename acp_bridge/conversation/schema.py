"""The queue store's SQLite schema, as an ordered list of migrations, and opening a file with it.
The records read back are in :mod:`.records`.

The schema version is ``PRAGMA user_version``: the number of migrations applied. Opening a store
runs :func:`migrate`, which applies the missing ones in order, all in one write transaction, so a
crash or an error part-way leaves the file at its old version. A migration, once released, is never
edited: a change to the schema is a new migration at the end of :data:`MIGRATIONS`.

``PRAGMA application_id`` marks the file as ours, so that ``--store`` pointed at some other SQLite
database is refused instead of being filled with our tables.

Checking comes first. :func:`connect` reads the file's ``application_id``, version and tables
before it changes anything, and :func:`connect_read_only` changes nothing at all: a foreign
SQLite database given as ``--store`` is left byte for byte as it was (issue 21).

History:

1. conversations, messages (seq, content, state, timestamps, outcome) and the event log.
2. Queue order apart from creation order: ``messages.position`` (an interrupt or a retry goes ahead
   of older queued messages while ``seq`` stays the creation order) and ``messages.attempts``.
   Existing messages keep their seq order; messages that had started count one attempt. The
   partial index ``messages_queue`` holds only queued messages, so finding the next one is an
   index lookup whose cost does not grow with history, and it makes queued positions unique.
   ``messages_running`` allows at most one running message per conversation.
3. The transcript and usage: ``messages.reply`` (the agent's text of the message's last turn;
   NULL when none was recorded, as for every message stored before this version),
   ``messages.reply_truncated``, ``messages.usage`` (JSON, what its attempts spent) and
   ``conversations.usage`` (JSON, the conversation's totals and its cost meter). Older rows
   read as "no reply recorded, nothing spent".
4. Steering (issue 24): the message states ``steering`` (committed, the agent's steering method
   called) and ``steered`` (taken into a running turn: final), and ``messages.steered_into`` (the
   seq of the turn a steered message joined; NULL otherwise). SQLite cannot alter a CHECK
   constraint, and rebuilding ``messages`` would need foreign keys off outside the migration's
   transaction, so the step widens the state CHECK in the stored schema text (SQLite's documented
   procedure for a change that leaves every stored row valid: ``writable_schema``, then a new
   ``schema_version``); see :func:`_allow_steering_states`. Existing rows are unchanged.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from typing import Final

from acp_bridge.errors import QueueStoreError
from acp_bridge.record import record
from acp_bridge.sqlite_wal import use_wal

__all__ = [
    "APPLICATION_ID",
    "LATEST_VERSION",
    "MIGRATIONS",
    "Migration",
    "connect",
    "connect_read_only",
    "migrate",
    "version_of",
]

# "ACPB" in ASCII: identifies an acp-bridge queue store in the SQLite header.
APPLICATION_ID: Final = 0x41435042


Step = str | Callable[[sqlite3.Connection], None]
"""A statement, or a function run on the connection inside the migration's transaction (for a
step one statement cannot say)."""


@record(slots=False)
class Migration:
    """One schema step: the statements that take the file from ``version - 1`` to ``version``."""

    version: int
    summary: str
    statements: tuple[Step, ...]


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

_V3 = Migration(
    3,
    "the agent's reply text and the usage per message, the usage per conversation",
    (
        "ALTER TABLE messages ADD COLUMN reply TEXT",
        """ALTER TABLE messages ADD COLUMN reply_truncated INTEGER NOT NULL DEFAULT 0
            CHECK (reply_truncated IN (0, 1))""",
        "ALTER TABLE messages ADD COLUMN usage TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE conversations ADD COLUMN usage TEXT NOT NULL DEFAULT '{}'",
    ),
)

_STATES_BEFORE_STEERING: Final = "'superseded', 'failed')"
_STATES_WITH_STEERING: Final = "'superseded', 'failed', 'steering', 'steered')"


def _allow_steering_states(conn: sqlite3.Connection) -> None:
    """Widen ``messages.state``'s CHECK to the steering states, in the stored schema text.

    Every stored row stays valid (the list only grows), which is the case SQLite documents for
    editing ``sqlite_schema`` under ``writable_schema``; the new ``schema_version`` makes every
    connection, this one included, read the schema again.
    """
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
    ).fetchone()
    sql = str(row[0]) if row is not None else ""
    if _STATES_BEFORE_STEERING not in sql:
        return  # no CHECK on the states (a store made by hand, say): every state is allowed
    if sql.count(_STATES_BEFORE_STEERING) != 1:
        raise sqlite3.DatabaseError("messages.state's CHECK is not the one schema version 1 made")
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute("PRAGMA writable_schema = ON")
    try:
        conn.execute(
            "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'messages'",
            (sql.replace(_STATES_BEFORE_STEERING, _STATES_WITH_STEERING),),
        )
        conn.execute(f"PRAGMA schema_version = {version + 1}")  # our own integer
    finally:
        conn.execute("PRAGMA writable_schema = OFF")


_V4 = Migration(
    4,
    "steering: the message states steering and steered, and the turn a steered message joined",
    (
        _allow_steering_states,
        "ALTER TABLE messages ADD COLUMN steered_into INTEGER",
    ),
)

MIGRATIONS: Final[tuple[Migration, ...]] = (_V1, _V2, _V3, _V4)
LATEST_VERSION: Final = len(MIGRATIONS)


def connect(path: str, *, busy_timeout_s: float, fsync: bool = False) -> sqlite3.Connection:
    """Open ``path`` for writing in autocommit mode, WAL, foreign keys on; migrate it.

    Nothing is changed before the file is known to be an acp-bridge store (or a new, empty
    file): the check reads only, then comes the switch to WAL, then the migrations. A foreign
    SQLite database given as the store is refused byte for byte as it was (issue 21).

    ``fsync=False`` (``synchronous=NORMAL``): a commit is in the WAL, handed to the operating
    system, when it returns; it survives a crash or SIGKILL of this process, and a power loss
    can roll back the latest commits but never corrupts the file (the WAL is fsynced at each
    checkpoint). ``fsync=True`` (``synchronous=FULL``): every commit is also fsynced before it
    returns, so it survives a power loss too, at the price of one fsync per commit.

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
        _read_ownership(conn, path)  # reads only: before any change
        mode = use_wal(conn, busy_timeout_s)
        if mode != "wal" and path != ":memory:":
            raise QueueStoreError(f"{path}: cannot use WAL mode (journal_mode is {mode})")
        conn.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
        migrate(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY:
            raise QueueStoreError(
                f"cannot write to the queue store {path}: {exc} (it can only be read here)"
            ) from exc
        raise QueueStoreError(f"{path} is not a readable acp-bridge queue store: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def connect_read_only(path: str, *, busy_timeout_s: float) -> sqlite3.Connection:
    """Open the store at ``path`` for reading only: nothing in or beside the file is changed
    (no WAL switch, no migration), so a store you may read but not write can be read.

    SQLite's ``mode=ro``; when that cannot read a WAL-mode store because its ``-shm`` cannot be
    made (a read-only directory) and it has no ``-wal`` file, ``immutable=1``: with no WAL,
    everything committed is in the file itself. A store of an older schema is read through a
    copy in memory, migrated there (the file keeps its version until a command that writes
    opens it).

    Raises:
        QueueStoreError: as :func:`connect`.
    """
    conn: sqlite3.Connection | None = None
    try:
        conn = _open_uri(path, "mode=ro", busy_timeout_s)
        try:
            version = _read_ownership(conn, path)
        except sqlite3.OperationalError:
            if os.path.lexists(path + "-wal"):
                raise
            conn.close()
            conn = _open_uri(path, "mode=ro&immutable=1", busy_timeout_s)
            version = _read_ownership(conn, path)
        if version < LATEST_VERSION:
            conn = _migrated_copy(conn, path)
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise QueueStoreError(f"{path} is not a readable acp-bridge queue store: {exc}") from exc
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    return conn


def _read_ownership(conn: sqlite3.Connection, path: str) -> int:
    """:func:`_check_ownership` in one read transaction (one snapshot: another process may be
    migrating the file meanwhile); the file's schema version."""
    conn.execute("BEGIN")
    try:
        return _check_ownership(conn, path, LATEST_VERSION)
    finally:
        conn.execute("ROLLBACK")


def _open_uri(path: str, query: str, busy_timeout_s: float) -> sqlite3.Connection:
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?{query}"
    conn = sqlite3.connect(
        uri, uri=True, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    return conn


def _migrated_copy(conn: sqlite3.Connection, path: str) -> sqlite3.Connection:
    """An in-memory copy of ``conn``'s database at the latest schema; ``conn`` is closed."""
    copy = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        conn.backup(copy)
        conn.close()
        copy.row_factory = sqlite3.Row
        copy.execute("PRAGMA foreign_keys = ON")
        migrate(copy, path)
    except BaseException:
        copy.close()
        raise
    return copy


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
                if isinstance(statement, str):
                    conn.execute(statement)
                else:
                    statement(conn)
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
