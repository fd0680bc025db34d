"""Fixtures of the store tests: a queue store holding conversation "c", on each backend.

``store`` is the SQLite store in a file of its own (the tests about SQLite itself: its file,
its WAL, its group commits). ``any_store`` is that store, and the PostgreSQL store in a fresh
database of a real server (``tests/conftest.py``'s ``pg_server``; skipped, saying why, where no
server can run): the store suite (``test_store.py``) takes it as its ``store``, so the same
tests hold on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_bridge.conversation.store import QueueStore
from acp_bridge.conversation.store_api import Store
from tests.conversation.stores import AGENT


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "queue.sqlite3"


@pytest.fixture
def store(path: Path) -> Iterator[QueueStore]:
    with QueueStore.open(path) as opened:
        opened.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        yield opened


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """The store under test, on each backend, holding conversation "c"."""
    if request.param == "sqlite":
        yield request.getfixturevalue("store")
        return
    from acp_bridge.pgstore.store import PgStore

    url = request.getfixturevalue("pg_url")
    with PgStore.open(url, owner_tag="test") as opened:
        opened.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        yield opened


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """None (the SQLite file of tests/conversation/live.py), then a fresh PostgreSQL
    database's URL."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("pg_url")
    return url
