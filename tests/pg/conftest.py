"""Fixtures of the PostgreSQL tests: one real server per test session (per xdist worker, each in
its own temporary directory, see :mod:`tests.pg_server`), and a fresh database per test (both
fixtures are in ``tests/conftest.py``: the store suite of ``tests/conversation`` uses them too).

Where no PostgreSQL binaries exist (or psycopg is not installed), the tests here are not
collected, and ``test_available.py`` is skipped with one line saying why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conversation.stores import AGENT
from tests.pg_server import no_server_reason

if no_server_reason() is None:
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


@pytest.fixture
def pg(pg_url: str) -> Iterator[PgConnection]:
    """A connection to a migrated, empty store holding conversation "c"."""
    with PgConnection.open(pg_url, owner_tag="test") as conn:
        migrate(conn)
        PgConversations(conn).create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        yield conn
