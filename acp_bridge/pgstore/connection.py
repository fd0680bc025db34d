"""One psycopg 3 connection to the PostgreSQL store: opened with our settings, one transaction at
a time under a lock, psycopg errors translated once, passwords never shown.

The connection is synchronous, as the SQLite store's is: async callers run its methods in a
worker thread (``anyio.to_thread.run_sync``), which works the same on asyncio and trio. It
imports no anyio.

Settings of every connection (:func:`connect`):

- autocommit, so that nothing is in a transaction but what :meth:`PgConnection.transaction`
  opens (a session-level advisory lock then lives exactly as long as the session);
- ``application_name`` ``acp-bridge:<owner tag>``, which lets a host that takes over from a dead
  owner find and end all of that owner's sessions (:mod:`.lease`);
- ``idle_in_transaction_session_timeout``: a process stopped (SIGSTOP, a partition) inside a
  transaction cannot hold its row locks for ever; the server ends its session;
- TCP keepalives (ignored on a Unix socket), so a peer that vanished is noticed by the kernel.

Errors. Every ``psycopg.Error`` becomes :class:`~acp_bridge.errors.QueueStoreError` naming the
store by its redacted URL and what failed, with any password scrubbed from the driver's text,
``from`` the original (:func:`translate`).

Connection loss. When the session itself is gone (the server ended it, the network cut it),
the error is a :class:`ConnectionLostError`, which says whether the transaction may have
committed: lost before the commit was sent, the server rolled it back (nothing happened, the
work may run again on a new session); lost during the commit, nobody knows. The session is
opened again by :meth:`PgConnection.reconnect` (a store retries within a bound: see
:mod:`.store`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg.rows import DictRow, dict_row

from acp_bridge.errors import QueueStoreError, ResourceClosedError
from acp_bridge.pgstore.url import redact, scrub

__all__ = [
    "CONNECT_TIMEOUT_S",
    "IDLE_IN_TRANSACTION_TIMEOUT_S",
    "ConnectionLostError",
    "PgConnection",
    "connect",
    "translate",
]

CONNECT_TIMEOUT_S: Final = 10
"""How long opening a connection may take (libpq's ``connect_timeout``, whole seconds)."""
IDLE_IN_TRANSACTION_TIMEOUT_S: Final = 30
"""How long a session may sit idle inside a transaction before the server ends it."""

Cursor = psycopg.Cursor[DictRow]


class ConnectionLostError(QueueStoreError):
    """The session to the server is gone. ``maybe_committed``: it was lost while committing,
    so the transaction may have committed (running the work again might do it twice)."""

    def __init__(self, message: str, *, maybe_committed: bool) -> None:
        super().__init__(message)
        self.maybe_committed = maybe_committed


def translate(
    exc: psycopg.Error,
    url: str,
    what: str,
    conn: psycopg.Connection[Any] | None = None,
    *,
    committing: bool = False,
) -> QueueStoreError:
    """The QueueStoreError for ``exc``: the store named by its redacted URL, no password; a
    :class:`ConnectionLostError` when ``conn`` (the session it happened on) is broken."""
    detail = scrub(str(exc).strip() or type(exc).__name__, url)
    message = f"{redact(url)}: could not {what}: {detail}"
    if conn is not None and conn.broken:
        return ConnectionLostError(message, maybe_committed=committing)
    return QueueStoreError(message)


def connect(
    url: str, *, owner_tag: str = "", purpose: str = "store"
) -> psycopg.Connection[DictRow]:
    """Open a connection to ``url`` with the settings in the module's text.

    ``owner_tag`` names the host (the lease's owner) in ``application_name``; ``purpose`` says
    what for in errors.

    Raises:
        QueueStoreError: the server cannot be reached or refused us (the message has no
            password).
    """
    try:
        return psycopg.connect(
            url,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=f"acp-bridge:{owner_tag}" if owner_tag else "acp-bridge",
            options=f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_S}s",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
    except psycopg.Error as exc:
        raise translate(exc, url, f"connect ({purpose})") from exc


class PgConnection:
    """A connection shared by threads: one transaction at a time (a lock), errors translated.

    ``name`` is the redacted URL, used in every message (as the SQLite store uses its path)."""

    def __init__(self, conn: psycopg.Connection[DictRow], url: str, *, owner_tag: str = "") -> None:
        self._conn: psycopg.Connection[DictRow] | None = conn
        self._url = url
        self.name = redact(url)
        self.owner_tag = owner_tag
        """The host this session belongs to (its ``application_name`` says so): the owner of
        the leases acquired on it."""
        self._lock = threading.Lock()
        # The thread running a batch (see batch()) and the batch's cursor: that thread's
        # transactions join the batch's.
        self._batch_thread: int | None = None
        self._batch_cursor: Cursor | None = None

    @classmethod
    def open(cls, url: str, *, owner_tag: str = "") -> PgConnection:
        """:func:`connect` to ``url``, wrapped. ``owner_tag`` names the host: one tag per host
        process, the same on all of its connections, unique among hosts."""
        return cls(connect(url, owner_tag=owner_tag), url, owner_tag=owner_tag)

    @property
    def raw(self) -> psycopg.Connection[DictRow]:
        """The psycopg connection (for what needs the session itself: locks, LISTEN)."""
        if self._conn is None:
            raise ResourceClosedError(f"the store connection to {self.name} is closed")
        return self._conn

    @property
    def url(self) -> str:
        """The URL this connection was opened with (it may hold a password: never show it)."""
        return self._url

    @property
    def backend_pid(self) -> int:
        """The server process of this session."""
        return self.raw.info.backend_pid

    @contextmanager
    def batch(self, what: str = "commit a batch of changes") -> Iterator[None]:
        """Make every transaction of this thread inside the block one transaction: one commit
        for all, all or nothing (as the SQLite store's batch). Other threads wait for the block
        to end (the lock is held throughout). A batch inside a batch joins the outer one."""
        if self._batch_thread == threading.get_ident():
            yield
            return
        with self.transaction(what) as cur:
            self._batch_thread, self._batch_cursor = threading.get_ident(), cur
            try:
                yield
            finally:
                self._batch_thread, self._batch_cursor = None, None

    @contextmanager
    def transaction(self, what: str) -> Iterator[Cursor]:
        """A cursor inside one transaction, under the lock; committed when the block ends,
        rolled back if it raises. psycopg errors become QueueStoreError here, once. Inside
        this thread's :meth:`batch`, the batch's transaction instead."""
        joined = self._batch_cursor
        if joined is not None and self._batch_thread == threading.get_ident():
            try:
                yield joined
            except psycopg.Error as exc:
                raise translate(exc, self._url, what, self._conn) from exc
            return
        with self._lock:
            conn = self.raw
            committing = False
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
                    committing = True  # the block's end commits: a loss now is ambiguous
            except psycopg.Error as exc:
                raise translate(exc, self._url, what, conn, committing=committing) from exc

    @contextmanager
    def session(self, what: str) -> Iterator[Cursor]:
        """A cursor outside any transaction (autocommit: each statement on its own), under the
        lock; errors translated."""
        with self._lock:
            conn = self.raw
            try:
                with conn.cursor() as cur:
                    yield cur
            except psycopg.Error as exc:
                # autocommit: a statement lost in flight may have run (ambiguous)
                raise translate(exc, self._url, what, conn, committing=True) from exc

    @property
    def in_batch(self) -> bool:
        """True inside this thread's :meth:`batch` (its transactions are the batch's)."""
        return self._batch_thread == threading.get_ident()

    @property
    def is_broken(self) -> bool:
        """True when the session was lost (the server ended it, or the network)."""
        conn = self._conn
        return conn is not None and conn.broken

    def reconnect(self) -> bool:
        """Open the session again, with the same URL and owner tag, if it was lost (its
        advisory locks are gone with the old one); True if it did. Not inside a batch.

        Raises:
            QueueStoreError: the server cannot be reached (yet).
            ResourceClosedError: the connection was closed on purpose.
        """
        with self._lock:
            old = self._conn
            if old is None:
                raise ResourceClosedError(f"the store connection to {self.name} is closed")
            if not old.broken:
                return False  # another thread opened it again already
            fresh = connect(self._url, owner_tag=self.owner_tag)
            self._conn = fresh
            old.close()
            return True

    def close(self) -> None:
        """Close the session (the server releases its advisory locks). Idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> PgConnection:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "OPEN" if self._conn is not None else "CLOSED"
        return f"<{type(self).__name__} {self.name} [{state}]>"
