"""The queue store's connection: one transaction at a time under a lock, sqlite3 errors
translated once, group commits (:meth:`StoreConnection.batch`) and commits that never wait
(:meth:`StoreConnection.commit_now_if_free`), the WAL's checkpoints, and closing. Every part of
the store runs its statements through the one :class:`StoreConnection` it was given. See
:mod:`.store` for the whole story.

Before every commit, with the write lock held, the store's path is checked to still name the
file this connection has open (:meth:`.StoreFile.is_in_place`, one ``lstat``): a store removed
or replaced under a live process is detected at its next commit, which is rolled back and raises
:class:`~acp_bridge.errors.StoreReplacedError` (issue 21). What a commit returns is therefore in
the file that was at the store's path when it committed. A store opened read-only refuses every
write."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from acp_bridge.conversation.store_file import StoreFile, is_file_path
from acp_bridge.errors import QueueStoreError, ResourceClosedError
from acp_bridge.sqlite_wal import WalCheckpointer

__all__ = ["StoreConnection"]


class StoreConnection:
    """The one connection of a :class:`~.store.QueueStore`, shared by its parts; thread-safe
    (one lock)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        *,
        fsync: bool = False,
        file: StoreFile | None = None,
        read_only: bool = False,
    ) -> None:
        """Use :meth:`QueueStore.open <.store.QueueStore.open>`. ``fsync``: the connection
        fsyncs every commit (``synchronous=FULL``). ``file``: the store's file as checked when
        it was opened, checked again before each commit. ``read_only``: every write is
        refused."""
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._file = file
        self._read_only = read_only
        self._lock = threading.Lock()
        # The thread running a batch (see batch()): its calls join the batch's transaction.
        self._batch_thread: int | None = None
        # commit_now_if_free() never waits: not for the disk (so not with an fsync per commit),
        # nor for another process (busy timeout 0 while it tries; restored afterwards).
        self._commits_without_waiting = not fsync and not read_only
        self._busy_timeout_ms: int = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        # Checkpoints run in a thread of their own, so no commit waits for one.
        self._checkpointer: WalCheckpointer | None = None
        if read_only:
            pass  # nothing to checkpoint: it writes nothing
        elif is_file_path(path):
            identity = None if file is None else (file.device, file.inode)
            self._checkpointer = WalCheckpointer(path, identity=identity)
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        elif path != ":memory:":
            self._commits_without_waiting = False  # a URI: SQLite checkpoints in its commits
        # The WAL restarts the background checkpoints made due, paid by commits that may wait
        # (see WalCheckpointer.restarts_due).
        self._restarts_paid = 0

    @property
    def path(self) -> str:
        return self._path

    def close(self) -> None:
        """Close the connection (the last one to the file checkpoints it). Idempotent."""
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        state = "OPEN" if self._conn is not None else "CLOSED"
        return f"<{type(self).__name__} {self._path} [{state}]>"

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    @contextmanager
    def batch(self, what: str = "commit a batch of changes") -> Iterator[None]:
        """Make every call of this thread inside the block one transaction: one commit for all.

        Group commit: a caller with several changes pending (a conversation's queued sends, a
        message's final state and the next one's start) pays for one commit instead of one
        each. All or nothing: if the block raises, none of its changes is kept. Calls from
        other threads wait for the block to end (the store's lock is held throughout).

        Raises:
            QueueStoreError: the transaction could not begin or commit.
        """
        with self._lock:
            conn = self._open_connection()
            self._refuse_if_read_only(what)
            due = self._restarts_due()
            try:
                conn.execute("BEGIN IMMEDIATE")
                self._batch_thread = threading.get_ident()
                try:
                    yield
                    self._check_in_place(what)
                    conn.execute("COMMIT")
                    self._committed(conn, restarts_paid=due)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                finally:
                    self._batch_thread = None
            except sqlite3.Error as exc:
                raise QueueStoreError(f"{self._path}: could not {what}: {exc}") from exc

    @contextmanager
    def transaction(self, what: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; sqlite3 errors become QueueStoreError here, once.
        Inside this thread's :meth:`batch`, the batch's transaction instead."""
        if self._batch_thread == threading.get_ident():
            try:
                yield self._open_connection()
            except sqlite3.Error as exc:
                raise QueueStoreError(f"{self._path}: could not {what}: {exc}") from exc
            return
        with self._lock:
            conn = self._open_connection()
            if write:
                self._refuse_if_read_only(what)
            due = self._restarts_due()
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                    if write:
                        self._check_in_place(what)
                    conn.execute("COMMIT")
                    if write:
                        self._committed(conn, restarts_paid=due)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise QueueStoreError(f"{self._path}: could not {what}: {exc}") from exc

    def commit_now_if_free(self, work: Callable[[], bool]) -> bool:
        """Run ``work`` in one transaction at once, in this thread, if that cannot wait: True
        once committed. False, with nothing kept, when it would have to wait (the store busy
        in another thread, another process writing, a store that fsyncs every commit) or when
        ``work`` returned False or a statement failed; the caller then goes the slow way
        (:meth:`batch` in a worker thread), which waits and reports errors.

        This is how async callers commit without a worker thread's round trip (about 0.2 ms
        here, against 0.1 ms for a queue turn's statements): the commit is a write into the
        WAL, which the operating system buffers, and checkpoints run elsewhere
        (:class:`~acp_bridge.sqlite_wal.WalCheckpointer`). ``work`` runs its store calls, which
        join this transaction, as in :meth:`batch`.
        """
        if (
            not self._commits_without_waiting
            or self._restarts_due() != self._restarts_paid  # this commit would fsync
            or not self._lock.acquire(blocking=False)
        ):
            return False
        try:
            conn = self._conn
            if conn is None:
                return False  # closed: the slow way raises ResourceClosedError for each call
            return self._commit_without_waiting(conn, work)
        finally:
            self._lock.release()

    def _commit_without_waiting(self, conn: sqlite3.Connection, work: Callable[[], bool]) -> bool:
        # With the lock held. Any sqlite3 error declines: nothing is kept, and the slow way
        # runs the same work again and reports what fails.
        committed = False
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                try:
                    conn.execute("BEGIN IMMEDIATE")  # busy at once if another process writes
                    self._batch_thread = threading.get_ident()
                    # Not in place: declined, and the slow way reports it.
                    if work() and self._is_in_place():
                        conn.execute("COMMIT")
                        committed = True
                        self._committed(conn)
                finally:
                    self._batch_thread = None
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
            finally:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        except sqlite3.Error:
            pass  # declined (or, after the commit, kept: committed says which)
        return committed

    def _is_in_place(self) -> bool:
        return self._file is None or self._file.is_in_place()

    def _check_in_place(self, what: str) -> None:
        """Before a commit, with the write lock held: the path still names our file."""
        if self._file is not None and not self._file.is_in_place():
            raise self._file.replaced_error(what)

    def _refuse_if_read_only(self, what: str) -> None:
        if self._read_only:
            raise QueueStoreError(f"{self._path}: opened read-only; cannot {what}")

    def _restarts_due(self) -> int:
        return 0 if self._checkpointer is None else self._checkpointer.restarts_due

    def _committed(self, conn: sqlite3.Connection, *, restarts_paid: int | None = None) -> None:
        """After each commit: count it for the background checkpoints, and go back to SQLite's
        own checkpoints if those fell too far behind (the WAL's bound). ``restarts_paid``: the
        WAL restarts due when this commit's transaction began (it made the restart, so a
        commit on an event loop's thread need not)."""
        if restarts_paid is not None:
            self._restarts_paid = max(self._restarts_paid, restarts_paid)
        if self._checkpointer is not None and self._checkpointer.committed():
            conn.execute("PRAGMA wal_autocheckpoint = 1000")
            # A commit may now run a checkpoint, and fsync: never again on an event loop.
            self._commits_without_waiting = False

    def _open_connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ResourceClosedError(f"the queue store {self._path} is closed")
        return self._conn
