"""Switching an SQLite file to WAL mode when other processes may be opening it too.

SQLite does not call its busy handler for a journal mode change: when several processes open a
new file at once, all but the one converting it get ``database is locked`` at once, whatever
``busy_timeout`` says (the soak met it with three ``acp-bridge run`` starting on one new store).
:func:`use_wal` retries a busy file with the patience the caller gives its other statements.
Standard library only: both the queue store and the built-in agent's history use it.

:class:`WalCheckpointer` takes checkpoints off the committing thread: with ``synchronous=NORMAL``
a checkpoint is where SQLite fsyncs, so an automatic one makes every hundredth commit or so
wait for the disk (measured on the queue store: 30% of a draining queue's store time).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from typing import Final

__all__ = ["CHECKPOINT_EVERY", "WalCheckpointer", "use_wal"]

log = logging.getLogger(__name__)

CHECKPOINT_EVERY: Final = 64
"""Commits between two checkpoints (a queue store commit writes about ten pages, so this is
close to SQLite's own default of 1,000 pages)."""
_BACKLOG_LIMIT: Final = 16
"""After this many times :data:`CHECKPOINT_EVERY` commits with no checkpoint done, the
committing connection does its own checkpoints again (see :meth:`WalCheckpointer.committed`)."""


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


class WalCheckpointer:
    """Checkpoints one SQLite file's WAL from a thread and a connection of its own, so that no
    commit waits for a checkpoint.

    The connection whose commits it follows turns its automatic checkpoints off
    (``PRAGMA wal_autocheckpoint = 0``) and calls :meth:`committed` after each commit. Every
    ``every`` commits the thread (started at the first one) runs a PASSIVE checkpoint, which
    never waits for a writer or a reader: what a reader still needs stays in the WAL for the
    next one. The last connection to close checkpoints what is left, as SQLite always does.

    Bound: the WAL is a buffer too. Should the thread fall behind or fail (an error is logged,
    once), :meth:`committed` says so once ``every`` x 16 commits went by with no checkpoint
    done, and the caller turns SQLite's automatic checkpoints back on: the WAL then grows no
    more than it would without this class.
    """

    def __init__(
        self,
        path: str,
        *,
        every: int = CHECKPOINT_EVERY,
        identity: tuple[int, int] | None = None,
    ) -> None:
        """``identity``: the file's (device, inode) as the committing connection opened it; the
        thread, which opens the file by its path later, checkpoints only that file (a store
        removed or replaced meanwhile is not checkpointed, and the committing side reports
        it)."""
        self._path = path
        self._identity = identity
        # Opened later, from another thread: absolute now (a chdir meanwhile must not change
        # the file), and read-write only (never create an empty file where the store was).
        self._absolute = os.path.abspath(path)
        self._uri = "file:" + urllib.parse.quote(self._absolute) + "?mode=rw"
        self._every = every
        self._commits = 0
        self._done_at = 0  # the commit count when the last checkpoint began
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._gave_up = False
        self._progress = threading.Condition()
        self.checkpoints = 0
        """Checkpoints done so far."""
        self.restarts_due = 0
        """Checkpoints so far that copied the whole WAL back. After each, the next transaction
        that writes starts the WAL over, and SQLite fsyncs the new WAL header in that commit:
        the store lets such a commit run only where waiting for the disk blocks nothing."""

    def committed(self) -> bool:
        """Count a commit (call it from the committing thread). True once, when the backlog
        passed its bound: the caller should turn automatic checkpoints back on."""
        self._commits += 1
        backlog = self._commits - self._done_at
        if backlog < self._every or self._gave_up:
            return False
        if backlog >= self._every * _BACKLOG_LIMIT:
            self._gave_up = True
            log.warning(
                "%s: the background checkpoint is %d commits behind; SQLite checkpoints "
                "while committing again",
                self._path,
                backlog,
            )
            return True
        if self._thread is None and not self._stopping:
            self._thread = threading.Thread(
                target=self._run, name=f"checkpoint {self._path}", daemon=True
            )
            self._thread.start()
        self._wake.set()
        return False

    def wait_for(self, checkpoints: int, timeout: float) -> bool:
        """Wait until ``checkpoints`` checkpoints are done; False if ``timeout`` passed first."""
        with self._progress:
            return self._progress.wait_for(lambda: self.checkpoints >= checkpoints, timeout)

    def close(self) -> None:
        """Stop the thread (after the checkpoint it may be running). Idempotent."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        failed = False
        try:
            conn = sqlite3.connect(
                self._uri, uri=True, isolation_level=None, check_same_thread=False
            )
            if not self._is_the_file():
                log.warning("%s: no background checkpoints: the file was replaced", self._path)
                return
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                started_at = self._commits
                try:
                    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:
                    if not failed:
                        log.warning("%s: background checkpoint failed: %s", self._path, exc)
                    failed = True
                    continue
                self._done_at = started_at
                if not busy and frames > 0 and copied == frames:
                    self.restarts_due += 1
                with self._progress:
                    self.checkpoints += 1
                    self._progress.notify_all()
        except sqlite3.Error as exc:  # could not even open the file
            log.warning("%s: no background checkpoints: %s", self._path, exc)
        finally:
            if conn is not None:
                conn.close()

    def _is_the_file(self) -> bool:
        """The path names the file the committing connection has open (SQLite has opened it
        for this connection by now: a check after that open)."""
        if self._identity is None:
            return True
        try:
            st = os.lstat(self._absolute)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._identity
