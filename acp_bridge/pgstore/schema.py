"""The PostgreSQL store's schema, as an ordered list of migrations, and :func:`migrate`.

The tables mirror the SQLite store's (:mod:`acp_bridge.conversation.schema`, at its version 4;
our version 2 adds what its version 4 added, the steering states and ``steered_into``):
conversations, messages with their states, queue positions, replies and usage, and the event
log, with the same columns, meanings and JSON-as-text encodings, so that one set of record
decoders reads both. PostgreSQL adds what sharing needs:

- ``conversations.lock_key``: a number per conversation, the key of its advisory lock (no two
  conversations share one, as hashing the id could make them);
- ``conversation_owners``: the lease of each conversation, its owner generation (the fencing
  token every owner write checks), the owner's tag and session, and its heartbeat
  (see :mod:`.lease`);
- ``control`` (version 3): a cancel or stop asked of the conversation's owner by a verb on
  another host, and the owner's answer (see :mod:`.control`);
- booleans are ``boolean``, times ``double precision`` (epoch seconds, as SQLite's REAL), event
  ids an identity column.

The version is the one row of ``acp_bridge_schema``: the number of migrations applied.
:func:`migrate` applies the missing ones in order in one transaction (PostgreSQL's DDL is
transactional), under a transaction-level advisory lock so that hosts starting together
migrate once; a crash or an error part-way leaves the database at its old version. A migration,
once released, is never edited: a change is a new migration at the end of :data:`MIGRATIONS`.

A database whose version is above what this acp-bridge knows is refused with a clear error
(never downgraded); a database that has our table names but no version row is refused too (it
is someone else's).

Least privileges: see ``docs/postgres.md``.
"""

from __future__ import annotations

from typing import Final

from acp_bridge.conversation.schema import Migration
from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import Cursor, PgConnection

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "MIGRATION_LOCK_KEY",
    "SchemaTooNewError",
    "migrate",
    "version_of",
]

MIGRATION_LOCK_KEY: Final = 0x4143_5042_0000_0001
"""The advisory lock migrations take ("ACPB", 1): hosts starting together migrate one by one."""

_V1 = Migration(
    1,
    "conversations, messages, the event log and the conversations' owners",
    (
        """CREATE TABLE conversations (
            id text PRIMARY KEY,
            lock_key bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            agent text NOT NULL,
            cwd text NOT NULL,
            session_id text,
            mcp_servers text NOT NULL DEFAULT '[]',
            additional_directories text NOT NULL DEFAULT '[]',
            config text NOT NULL DEFAULT '{}',
            paused boolean NOT NULL DEFAULT false,
            title text,
            usage text NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX conversations_by_update ON conversations (updated_at)",
        """CREATE TABLE messages (
            conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            seq bigint NOT NULL CHECK (seq > 0),
            position bigint NOT NULL,
            content text NOT NULL,
            state text NOT NULL CHECK (state IN
                ('queued', 'running', 'done', 'cancelled', 'superseded', 'failed')),
            stop_reason text,
            error text,
            recoverable boolean,
            attempts integer NOT NULL DEFAULT 0,
            created_at double precision NOT NULL,
            started_at double precision,
            finished_at double precision,
            reply text,
            reply_truncated boolean NOT NULL DEFAULT false,
            usage text NOT NULL DEFAULT '{}',
            PRIMARY KEY (conversation_id, seq)
        )""",
        """CREATE UNIQUE INDEX messages_queue ON messages (conversation_id, position)
            WHERE state = 'queued'""",
        """CREATE UNIQUE INDEX messages_running ON messages (conversation_id)
            WHERE state = 'running'""",
        "CREATE INDEX messages_by_position ON messages (conversation_id, position)",
        """CREATE TABLE events (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            ts double precision NOT NULL,
            seq bigint,
            kind text NOT NULL,
            data text NOT NULL,
            FOREIGN KEY (conversation_id, seq) REFERENCES messages (conversation_id, seq)
                ON DELETE CASCADE
        )""",
        "CREATE INDEX events_by_conversation ON events (conversation_id, id)",
        """CREATE TABLE conversation_owners (
            conversation_id text PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
            generation bigint NOT NULL CHECK (generation > 0),
            owner text NOT NULL,
            backend_pid integer,
            acquired_at timestamptz NOT NULL DEFAULT now(),
            heartbeat_at timestamptz NOT NULL DEFAULT now()
        )""",
    ),
)

_V2 = Migration(
    2,
    "steering: the message states steering and steered, and the turn a steered message joined",
    (
        "ALTER TABLE messages DROP CONSTRAINT messages_state_check",
        """ALTER TABLE messages ADD CONSTRAINT messages_state_check CHECK (state IN
            ('queued', 'running', 'done', 'cancelled', 'superseded', 'failed', 'steering',
             'steered'))""",
        "ALTER TABLE messages ADD COLUMN steered_into bigint",
    ),
)

_V3 = Migration(
    3,
    "control: cancel and stop asked of a conversation's owner through the database, answered",
    (
        """CREATE TABLE control (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            kind text NOT NULL CHECK (kind IN ('cancel', 'stop')),
            seq bigint,
            asked_by text NOT NULL DEFAULT '',
            asked_at timestamptz NOT NULL DEFAULT now(),
            answered_at timestamptz,
            outcome text
        )""",
        """CREATE INDEX control_pending ON control (conversation_id, id)
            WHERE answered_at IS NULL""",
        "CREATE INDEX control_by_age ON control (asked_at)",
    ),
)

MIGRATIONS: Final[tuple[Migration, ...]] = (_V1, _V2, _V3)
LATEST_VERSION: Final = len(MIGRATIONS)

_VERSION_TABLE: Final = """CREATE TABLE IF NOT EXISTS acp_bridge_schema (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    version integer NOT NULL CHECK (version >= 0)
)"""


class SchemaTooNewError(QueueStoreError):
    """The database was migrated by a newer acp-bridge than this one."""

    def __init__(self, name: str, version: int, latest: int) -> None:
        super().__init__(
            f"{name} was migrated by a newer acp-bridge (store schema version {version}; this "
            f"version knows up to {latest}); upgrade acp-bridge or use another --store"
        )
        self.version = version
        self.latest = latest


def version_of(conn: PgConnection) -> int:
    """The database's schema version (0 when it has none yet)."""
    with conn.transaction("read the schema version") as cur:
        return _read_version(cur, conn.name)


def migrate(conn: PgConnection, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring the database up to ``len(migrations)`` in one transaction; return that version.
    Idempotent: at the latest version it changes nothing (and needs no DDL privilege).

    Raises:
        SchemaTooNewError: the database's version is above ``len(migrations)``.
        QueueStoreError: the database holds our tables without a version (not ours), the role
            lacks a privilege, or the server failed.
    """
    latest = len(migrations)
    with conn.transaction("migrate the store schema") as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        current = _read_version(cur, conn.name)
        if current > latest:
            raise SchemaTooNewError(conn.name, current, latest)
        if current == latest:
            return latest
        if current == 0:  # the version table, unless an empty one is there already
            cur.execute(_VERSION_TABLE)
            cur.execute("INSERT INTO acp_bridge_schema (version) VALUES (0) ON CONFLICT DO NOTHING")
        for migration in migrations[current:]:
            for statement in migration.statements:
                if not isinstance(statement, str):  # a Python step: SQLite's alone
                    raise TypeError(f"PostgreSQL migration {migration.version} has a Python step")
                cur.execute(statement.encode())  # our own text, no parameters
            cur.execute("UPDATE acp_bridge_schema SET version = %s", (migration.version,))
    return latest


def _read_version(cur: Cursor, name: str) -> int:
    cur.execute(
        "SELECT to_regclass('acp_bridge_schema') IS NOT NULL AS versioned,"
        " to_regclass('conversations') IS NOT NULL AS tables"
    )
    found = cur.fetchone()
    assert found is not None
    if not found["versioned"]:
        if found["tables"]:
            raise QueueStoreError(
                f"{name} has a conversations table but no acp-bridge schema version: it is not "
                "an acp-bridge store (use a database or schema of its own)"
            )
        return 0
    cur.execute("SELECT version FROM acp_bridge_schema")
    row = cur.fetchone()
    return 0 if row is None else int(row["version"])
