"""Switching an SQLite file to WAL mode when other processes may be opening it too.

SQLite does not call its busy handler for a journal mode change: when several processes open a
new file at once, all but the one converting it get ``database is locked`` at once, whatever
``busy_timeout`` says (the soak met it with three ``acp-bridge run`` starting on one new store).
:func:`use_wal` retries a busy file with the patience the caller gives its other statements.
Standard library only: both the queue store and the built-in agent's history use it.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["use_wal"]


def use_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> str:
    """Switch ``conn``'s file to WAL mode (a no-op when it already is); return the mode in force
    (``"memory"`` for an in-memory database, which has no WAL).

    Raises:
        sqlite3.OperationalError: the file stayed busy for ``busy_timeout_s``, or another error.
    """
    deadline = time.monotonic() + busy_timeout_s
    pause_s = 0.001
    while True:
        try:
            mode: str = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", 0)  # absent when the module raised it
            busy = code & 0xFF == sqlite3.SQLITE_BUSY  # any extended BUSY_*
            if not busy or time.monotonic() >= deadline:
                raise
        else:
            return mode
        # Only another opener's conversion holds the file here, for a few milliseconds.
        time.sleep(pause_s)
        pause_s = min(pause_s * 2, 0.05)
