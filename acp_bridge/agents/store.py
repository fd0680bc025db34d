"""The agent's history in SQLite, so ``session/load`` replays a session across agent restarts.

Per session: its cwd, title, mode, model and cumulative cost, then an append-only list of
entries, each either a model ``message`` (what the model sees next turn) or an ``update``
(a ``session/update`` payload replayed by ``session/load``, streamed text coalesced into one
chunk per message). A turn's user message is written when the turn starts, the rest when it
ends, each in one transaction: a crash mid-turn keeps what the user asked.

The file is created 0600 in a 0700 directory (histories hold code and prompts). Calls are
synchronous: the agent is its own process and each write is one small WAL transaction.
Growth: a session's entries are read whole on load (linear); the model context they make is
bounded by the model's window, which the provider enforces (an overflow is reported as a
``context_window`` error).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from acp_bridge.sqlite_wal import use_wal

__all__ = ["HistoryStore", "StoredSession"]

_BUSY_TIMEOUT_S: Final = 5.0
"""How long a statement waits for another agent process writing the same history file."""

PAGE_SIZE: Final = 50
"""Sessions per ``session/list`` page."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, cwd TEXT NOT NULL, title TEXT, created REAL NOT NULL,
    updated REAL NOT NULL, mode TEXT NOT NULL, model TEXT NOT NULL, cost REAL);
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('message', 'update')), body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq));
"""

EntryKind = Literal["message", "update"]


@dataclass
class StoredSession:
    id: str
    cwd: str
    title: str | None
    updated: float
    mode: str
    model: str
    cost: float | None


class HistoryStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._db = sqlite3.connect(path, isolation_level=None, timeout=_BUSY_TIMEOUT_S)
        use_wal(self._db, _BUSY_TIMEOUT_S)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def create(self, session_id: str, cwd: str, mode: str, model: str) -> None:
        now = time.time()
        self._db.execute(
            "INSERT INTO sessions (id, cwd, created, updated, mode, model) VALUES (?,?,?,?,?,?)",
            (session_id, cwd, now, now, mode, model),
        )

    def get(self, session_id: str) -> StoredSession | None:
        row = self._db.execute(
            "SELECT id, cwd, title, updated, mode, model, cost FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        return StoredSession(*row) if row else None

    def update(self, session_id: str, **fields: Any) -> None:
        allowed = {"title", "mode", "model", "cost"}
        assert set(fields) <= allowed, fields
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._db.execute(
            f"UPDATE sessions SET {assignments}, updated = ? WHERE id = ?",
            (*fields.values(), time.time(), session_id),
        )

    def append(self, session_id: str, entries: list[tuple[EntryKind, dict[str, Any]]]) -> None:
        if not entries:
            return
        with self._transaction():
            (last,) = self._db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM entries WHERE session_id = ?", (session_id,)
            ).fetchone()
            self._db.executemany(
                "INSERT INTO entries (session_id, seq, kind, body) VALUES (?,?,?,?)",
                [
                    (session_id, last + i + 1, kind, json.dumps(body, separators=(",", ":")))
                    for i, (kind, body) in enumerate(entries)
                ],
            )
            self._db.execute(
                "UPDATE sessions SET updated = ? WHERE id = ?", (time.time(), session_id)
            )

    def entries(self, session_id: str, kind: EntryKind) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT body FROM entries WHERE session_id = ? AND kind = ? ORDER BY seq",
            (session_id, kind),
        )
        return [json.loads(body) for (body,) in rows]

    def list(self, cwd: str | None, cursor: str | None) -> tuple[list[StoredSession], str | None]:
        """A page of sessions, most recently updated first; the cursor is an offset."""
        offset = int(cursor) if cursor and cursor.isdigit() else 0
        query = "SELECT id, cwd, title, updated, mode, model, cost FROM sessions"
        params: tuple[Any, ...] = ()
        if cwd is not None:
            query += " WHERE cwd = ?"
            params = (cwd,)
        query += " ORDER BY updated DESC, id LIMIT ? OFFSET ?"
        rows = self._db.execute(query, (*params, PAGE_SIZE + 1, offset)).fetchall()
        more = len(rows) > PAGE_SIZE
        sessions = [StoredSession(*row) for row in rows[:PAGE_SIZE]]
        return sessions, (str(offset + PAGE_SIZE) if more else None)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")
