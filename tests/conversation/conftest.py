"""Fixtures of the store tests: a queue store in a file of its own, holding conversation "c"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_bridge.conversation.store import QueueStore
from tests.conversation.stores import AGENT


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "queue.sqlite3"


@pytest.fixture
def store(path: Path) -> Iterator[QueueStore]:
    with QueueStore.open(path) as opened:
        opened.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        yield opened
