"""Fixtures of the PostgreSQL tests: one real server per test session (per xdist worker, each in
its own temporary directory, see :mod:`tests.pg_server`), and a fresh database per test.

Where no PostgreSQL binaries exist (or psycopg is not installed), the tests here are not
collected, and ``test_available.py`` is skipped with one line saying why.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conversation.stores import AGENT
from tests.pg_server import PgServer, no_server_reason, start_server

if no_server_reason() is None:
    import psycopg

    from acp_bridge.pgstore.connection import PgConnection
    from acp_bridge.pgstore.conversations import PgConversations
    from acp_bridge.pgstore.schema import migrate
else:
    # Not collected (they import psycopg, or need a server); test_available.py says why, in
    # one line.
    collect_ignore = [
        path.name for path in Path(__file__).parent.glob("test_*.py")
        if path.name != "test_available.py"
    ]  # fmt: skip


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A new, empty database of its own for the test; dropped afterwards (its connections
    with it)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server.url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_server.url(name)
    finally:
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg(pg_url: str) -> Iterator[PgConnection]:
    """A connection to a migrated, empty store holding conversation "c"."""
    with PgConnection.open(pg_url, owner_tag="test") as conn:
        migrate(conn)
        PgConversations(conn).create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        yield conn
