"""What the store tests share: the agent record their conversations store, and message content."""

from __future__ import annotations

import sqlite3
from typing import Any

from acp_bridge.conversation.store import QueueStore
from acp_bridge.sqlite_wal import WalCheckpointer

AGENT = {"name": "echo", "argv": ["python", "echo_agent.py"], "env": {}, "cwd": "/work"}


def text(value: str) -> list[dict[str, Any]]:
    """One text content block."""
    return [{"type": "text", "text": value}]


def sqlite_of(store: QueueStore) -> sqlite3.Connection:
    """The open store's own SQLite connection (for its per-connection settings)."""
    conn = store._connection._conn
    assert conn is not None
    return conn


def checkpointer_of(store: QueueStore) -> WalCheckpointer:
    """The store's background checkpointer (a store on a file has one)."""
    checkpointer = store._connection._checkpointer
    assert checkpointer is not None
    return checkpointer
