"""Schema version 4 (issue 24): the steering states, added to a store of version 3 whose rows
stay as they were; a read-only open of an older store reads it through a migrated copy."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from acp_bridge.conversation.schema import (
    LATEST_VERSION,
    MIGRATIONS,
    connect,
    connect_read_only,
    migrate,
)
from acp_bridge.conversation.store import QueueStore


def _version_3_store(path: Path) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, str(path), MIGRATIONS[:3])
        conn.execute(
            "INSERT INTO conversations (id, created_at, updated_at, agent, cwd)"
            " VALUES ('c', 1, 1, '{}', '/w')"
        )
        conn.execute(
            "INSERT INTO messages (conversation_id, seq, content, state, created_at, position)"
            " VALUES ('c', 1, '[]', 'done', 1, 1)"
        )


def test_version_4_allows_the_steering_states_and_keeps_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _version_3_store(path)
    with closing(connect(str(path), busy_timeout_s=1)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION == 4
        rows = conn.execute("SELECT seq, state, steered_into FROM messages").fetchall()
        assert [tuple(row) for row in rows] == [(1, "done", None)]
        for seq, state in ((2, "steering"), (3, "steered")):
            conn.execute(
                "INSERT INTO messages (conversation_id, seq, content, state, created_at)"
                " VALUES ('c', ?, '[]', ?, 1)",
                (seq, state),
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute(
                "INSERT INTO messages (conversation_id, seq, content, state, created_at)"
                " VALUES ('c', 4, '[]', 'bogus', 1)"
            )
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_read_only_open_reads_a_version_3_store_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _version_3_store(path)
    before = path.read_bytes()
    with closing(connect_read_only(str(path), busy_timeout_s=1)) as conn:
        assert [tuple(r) for r in conn.execute("SELECT state FROM messages")] == [("done",)]
    assert path.read_bytes() == before


def test_refused_steers_are_stored_in_their_order_at_the_queue_head(tmp_path: Path) -> None:
    text = [{"type": "text", "text": "x"}]
    with QueueStore.open(tmp_path / "q.db") as store:
        store.create_conversation("c", agent={}, cwd="/w", now=1.0)
        store.add_message("c", text, now=1.0)  # 1, queued
        for _ in range(2):  # 2 and 3: steering
            store.add_message("c", text, next=True, steering=True, now=1.0)
        assert store.steer_refused("c", 2, now=2.0)
        assert store.steer_refused("c", 3, behind=(2,), now=2.0)
        store.add_message("c", text, next=True, behind=(2, 3), now=3.0)  # 4: fell back at once
        assert [m.seq for m in store.queued("c")] == [2, 3, 4, 1]
        assert not store.steer_refused("c", 2, now=4.0)  # queued now: not steering
