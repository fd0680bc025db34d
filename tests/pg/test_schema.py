"""The PostgreSQL schema: migrations are idempotent, serialized, and a newer schema is refused."""

from __future__ import annotations

import threading

import pytest

from acp_bridge.conversation.schema import Migration
from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.conversations import PgConversations
from acp_bridge.pgstore.schema import (
    LATEST_VERSION,
    MIGRATIONS,
    SchemaTooNewError,
    migrate,
    version_of,
)
from tests.conversation.stores import AGENT


def test_migrating_twice_changes_nothing_the_second_time(pg_url: str) -> None:
    with PgConnection.open(pg_url) as conn:
        assert version_of(conn) == 0
        assert migrate(conn) == LATEST_VERSION
        with conn.transaction("list") as cur:
            cur.execute("SELECT count(*) AS n FROM pg_class WHERE relkind IN ('r', 'i')")
            before = cur.fetchone()
        assert migrate(conn) == LATEST_VERSION
        with conn.transaction("list") as cur:
            cur.execute("SELECT count(*) AS n FROM pg_class WHERE relkind IN ('r', 'i')")
            assert cur.fetchone() == before
        assert version_of(conn) == LATEST_VERSION


def test_hosts_migrating_at_once_migrate_once(pg_url: str) -> None:
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with PgConnection.open(pg_url) as conn:
                migrate(conn)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with PgConnection.open(pg_url) as conn:
        assert version_of(conn) == LATEST_VERSION


def test_a_later_migration_upgrades_an_older_database_in_place(pg_url: str) -> None:
    later = Migration(
        LATEST_VERSION + 1, "a test column", ("ALTER TABLE messages ADD COLUMN x int",)
    )
    with PgConnection.open(pg_url) as conn:
        migrate(conn)
        assert migrate(conn, (*MIGRATIONS, later)) == LATEST_VERSION + 1
        assert version_of(conn) == LATEST_VERSION + 1
        with conn.transaction("read") as cur:
            cur.execute("SELECT x FROM messages")


def test_a_newer_schema_is_refused_with_its_version_and_ours(pg_url: str) -> None:
    with PgConnection.open(pg_url) as conn:
        migrate(conn)
        with conn.transaction("pretend") as cur:
            cur.execute("UPDATE acp_bridge_schema SET version = 99")
        known = f"version 99; this version knows up to {LATEST_VERSION}"
        with pytest.raises(SchemaTooNewError, match=known):
            migrate(conn)
        assert version_of(conn) == 99


def test_a_failed_migration_leaves_the_database_at_its_old_version(pg_url: str) -> None:
    broken = Migration(LATEST_VERSION + 1, "broken", ("ALTER TABLE nowhere ADD COLUMN x int",))
    with PgConnection.open(pg_url) as conn:
        with pytest.raises(QueueStoreError, match="nowhere"):
            migrate(conn, (*MIGRATIONS, broken))
        assert version_of(conn) == 0


def test_a_database_with_someone_elses_conversations_table_is_refused(pg_url: str) -> None:
    with PgConnection.open(pg_url) as conn:
        with conn.transaction("theirs") as cur:
            cur.execute("CREATE TABLE conversations (id int)")
        with pytest.raises(QueueStoreError, match="not an acp-bridge store"):
            migrate(conn)


def test_a_store_at_version_2_gains_the_control_table_and_keeps_its_conversations(
    pg_url: str,
) -> None:
    with PgConnection.open(pg_url) as conn:
        assert migrate(conn, MIGRATIONS[:2]) == 2
        PgConversations(conn).create_conversation("kept", agent=AGENT, cwd="/w", now=1.0)
        assert migrate(conn) == LATEST_VERSION == 3
        with conn.transaction("read") as cur:
            cur.execute("SELECT id FROM conversations")
            assert [row["id"] for row in cur.fetchall()] == ["kept"]
            cur.execute("SELECT count(*) AS n FROM control")
            row = cur.fetchone()
            assert row is not None and row["n"] == 0
        assert migrate(conn) == 3  # idempotent
