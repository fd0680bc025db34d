"""The durable FIFO queue and turn log of the conversation layer, in SQLite.

:class:`QueueStore` is synchronous and thread-safe: one connection (``check_same_thread=False``)
guarded by a lock, so async callers may run it in a worker thread. It imports no anyio.

Durability. The file is in WAL mode with ``synchronous=FULL``: every mutating call is one committed
``BEGIN IMMEDIATE`` transaction, and when it returns the change is in the WAL and fsynced. A message
is durable when :meth:`QueueStore.add_message` returns, across a SIGKILL of the process and (as far
as the disk honours fsync) a power loss. ``BEGIN IMMEDIATE`` plus ``busy_timeout`` lets several
processes share a file safely.

The queue. A message's ``seq`` is its creation order (1, 2, 3, ... per conversation, dense).
Its ``position`` is its place in the queue: a normal send goes after every message ever queued;
``next=True`` (an interrupt, or a retry the user wants now) goes ahead of every queued message,
including earlier ``next=True`` ones. The next message to prompt is always the queued message with
the lowest position, read from a partial index that holds only queued messages. There is no stored
cursor, so a missing or unknown cursor cannot spin or replay history, and a conversation stored by
an older schema (see :mod:`.schema`) carries on with its queued messages, never its history.

States: ``queued -> running -> done | cancelled | superseded | failed``; ``queued`` may also go
straight to a final state (cancelled by a stop before it was prompted). A final state is never
changed by :meth:`~QueueStore.finish` again: that is the exactly-once guarantee. The only way out
of a final state is an explicit :meth:`~QueueStore.requeue` (the user's retry), allowed from
cancelled, superseded and failed but not from done (send the content again instead); the row keeps
its seq and ``attempts`` and forgets the earlier outcome, so log that as an event first if wanted.
At most one message per conversation is running.

After a crash. Nothing is recovered at open, because a reader may open the file while a bridge in
another process is running a turn. The process that drives a conversation calls
:meth:`~QueueStore.recover_after_crash` first: a message left ``running`` becomes failed and
recoverable, and is never prompted again by itself. (The store does not stop two processes from
driving one conversation; that is the caller's job.)

Time is an argument (``now``, epoch seconds). ``updated_at`` never goes backwards, so a clock step
back does not reorder :meth:`~QueueStore.latest_conversation`. Events do not touch it.

Privacy. The store holds prompts. A store file that :meth:`QueueStore.open` creates is mode
0600 whatever the umask (SQLite gives its ``-wal`` and ``-shm`` files the main file's mode); an
existing file keeps the mode its owner chose.

Errors. Every ``sqlite3.Error`` becomes :class:`QueueStoreError` naming the file and what failed,
``from`` the original. A conversation or message that does not exist raises
:class:`UnknownConversationError` / :class:`UnknownMessageError` (``get_*`` return None instead);
bad state names and missing outcome fields raise ValueError; use after :meth:`~QueueStore.close`
raises ResourceClosedError.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypedDict, TypeVar, Unpack

from acp_bridge.conversation.queue_model import BRIDGE_STOPPED_ERROR
from acp_bridge.conversation.schema import (
    ConversationRecord,
    EventRecord,
    MessageState,
    StoredMessage,
    connect,
    conversation_from_row,
    dumps,
    event_from_row,
    message_from_row,
)
from acp_bridge.errors import (
    AlreadyRunningError,
    QueueStoreError,
    ResourceClosedError,
    UnknownConversationError,
    UnknownMessageError,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "AlreadyRunningError",
    "ConversationChanges",
    "ConversationRecord",
    "EventRecord",
    "LogEntry",
    "MessageState",
    "QueueStore",
    "StoredMessage",
    "UnknownConversationError",
    "UnknownMessageError",
]

# How long a write waits for another process's write transaction before failing.
BUSY_TIMEOUT_S: Final = 10.0
_RETRYABLE: Final = (MessageState.CANCELLED, MessageState.SUPERSEDED, MessageState.FAILED)
_JSON_FIELDS: Final = frozenset({"config", "mcp_servers", "additional_directories"})
_T = TypeVar("_T")

LogEntry = tuple[str, Any, "int | None"]
"""One event log entry to write: (kind, JSON data, the message seq it belongs to or None)."""


PRIVATE_FILE_MODE: Final = 0o600


def _create_private(path: str) -> None:
    """Create ``path`` empty with mode 0600 (the umask can only remove bits, hence the fchmod)
    before SQLite opens it; leave an existing file as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    except OSError as exc:
        raise QueueStoreError(f"cannot open the queue store {path}: {exc}") from exc
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)


class ConversationChanges(TypedDict, total=False):
    """The fields :meth:`QueueStore.update_conversation` may change; absent ones stay as is."""

    session_id: str | None
    config: Mapping[str, Any]
    paused: bool
    mcp_servers: Sequence[Any]
    additional_directories: Sequence[Any]
    title: str | None


class QueueStore:
    """Conversations, their message queues and their event logs in one SQLite file."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        """Use :meth:`open`."""
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path | str) -> QueueStore:
        """Open (creating if needed) and migrate the store at ``path`` (``":memory:"`` for tests).

        Raises:
            QueueStoreError: the file cannot be opened, is not an SQLite database (corrupt), is
                not an acp-bridge store, or was written by a newer acp-bridge.
        """
        name = str(path)
        if name != ":memory:" and not name.startswith("file:"):
            _create_private(name)
        return cls(connect(name, busy_timeout_s=BUSY_TIMEOUT_S), name)

    @property
    def path(self) -> str:
        return self._path

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> QueueStore:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<QueueStore {self._path} [{'OPEN' if self._conn is not None else 'CLOSED'}]>"

    # -- conversations ---------------------------------------------------------------------------

    def create_conversation(
        self,
        conversation_id: str | None = None,
        *,
        agent: Mapping[str, Any],
        cwd: str,
        mcp_servers: Sequence[Any] = (),
        additional_directories: Sequence[Any] = (),
        config: Mapping[str, Any] | None = None,
        title: str | None = None,
        now: float,
    ) -> ConversationRecord:
        """Store a new conversation (a random id when none is given).

        Raises:
            QueueStoreError: a conversation with this id already exists.
        """
        cid = uuid.uuid4().hex if conversation_id is None else conversation_id
        if not cid:
            raise ValueError("a conversation id must not be empty")
        row = (
            cid, now, now, dumps(dict(agent)), cwd, dumps(_as_list(mcp_servers)),
            dumps(_as_list(additional_directories)), dumps(dict(config or {})), title,
        )  # fmt: skip
        with self._transaction(f"create conversation {cid!r}") as db:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (cid,)).fetchone():
                raise QueueStoreError(f"{self._path}: conversation {cid!r} already exists")
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at, agent, cwd, mcp_servers,"
                " additional_directories, config, title) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            return self._conversation(db, cid)

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        with self._transaction("read a conversation", write=False) as db:
            row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
            found = row.fetchone()
            return None if found is None else self._decode(conversation_from_row, found)

    def latest_conversation(self) -> ConversationRecord | None:
        """The most recently updated conversation (ties: the one created last)."""
        conversations = self._list_conversations(limit=1)
        return conversations[0] if conversations else None

    def latest_resumable(
        self, cwd: str | None, argv: Sequence[str] | None = None
    ) -> ConversationRecord | None:
        """The most recently updated conversation in ``cwd`` (any directory when None) whose
        agent command is ``argv`` (any agent when None) and whose agent started a session (one
        that never got that far has nothing to continue)."""
        with self._transaction("find a conversation to resume", write=False) as db:
            rows = db.execute(
                "SELECT * FROM conversations WHERE (? IS NULL OR cwd = ?)"
                " AND session_id IS NOT NULL ORDER BY updated_at DESC, rowid DESC",
                (cwd, cwd),
            )
            for row in rows:
                record = self._decode(conversation_from_row, row)
                if argv is None or list(record.agent.get("argv") or []) == list(argv):
                    return record
            return None

    def list_conversations(self) -> list[ConversationRecord]:
        """Every conversation, most recently updated first."""
        return self._list_conversations(limit=-1)

    def update_conversation(
        self, conversation_id: str, *, now: float, **changes: Unpack[ConversationChanges]
    ) -> ConversationRecord:
        """Change only the fields given (see :class:`ConversationChanges`); return the record."""
        unknown = set(changes) - set(ConversationChanges.__annotations__)
        if unknown:
            raise TypeError(f"update_conversation() got unknown fields {sorted(unknown)}")
        values = [_encode_change(name, value) for name, value in changes.items()]
        # Column names are the checked keys of ConversationChanges, never free text.
        assignments = "".join(f", {name} = ?" for name in changes)
        with self._transaction(f"update conversation {conversation_id!r}") as db:
            self._require(db, conversation_id)
            db.execute(
                f"UPDATE conversations SET updated_at = MAX(updated_at, ?){assignments}"
                " WHERE id = ?",
                (now, *values, conversation_id),
            )
            return self._conversation(db, conversation_id)

    # -- the queue -------------------------------------------------------------------------------

    def add_message(
        self,
        conversation_id: str,
        content: Sequence[Any],
        *,
        next: bool = False,
        unpause: bool = False,
        now: float,
    ) -> StoredMessage:
        """Queue a message (committed and fsynced on return) and return it.

        ``next=True`` puts it ahead of every queued message; ``unpause=True`` also clears the
        conversation's paused flag in the same transaction (a new send after a stop resumes).
        """
        body = dumps(_as_list(content))
        with self._transaction(f"add a message to {conversation_id!r}") as db:
            self._require(db, conversation_id)
            seq: int = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()[0]
            position = _position(db, conversation_id, next=next)
            db.execute(
                "INSERT INTO messages (conversation_id, seq, position, content, state, created_at)"
                " VALUES (?, ?, ?, ?, 'queued', ?)",
                (conversation_id, seq, position, body, now),
            )
            _touch(db, conversation_id, now, unpause=unpause)
            message = self._message(db, conversation_id, seq)
            assert message is not None  # inserted just above, in this transaction
            return message

    def next_queued(self, conversation_id: str) -> StoredMessage | None:
        """The queued message with the lowest position, or None: an index lookup, never a scan."""
        with self._transaction("find the next queued message", write=False) as db:
            row = db.execute(
                "SELECT * FROM messages INDEXED BY messages_queue"
                " WHERE conversation_id = ? AND state = 'queued' ORDER BY position LIMIT 1",
                (conversation_id,),
            ).fetchone()
            if row is None:
                self._require(db, conversation_id)
                return None
            return self._decode(message_from_row, row)

    def queued(self, conversation_id: str) -> list[StoredMessage]:
        """Every queued message in prompt order (a restarted bridge rebuilds its queue from it)."""
        with self._transaction("list the queue", write=False) as db:
            self._require(db, conversation_id)
            rows = db.execute(
                "SELECT * FROM messages INDEXED BY messages_queue"
                " WHERE conversation_id = ? AND state = 'queued' ORDER BY position",
                (conversation_id,),
            )
            return [self._decode(message_from_row, row) for row in rows.fetchall()]

    def mark_running(
        self,
        conversation_id: str,
        seq: int,
        *,
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool:
        """queued -> running, counting an attempt. False if the message is no longer queued.

        ``event`` (kind, data) is logged in the same transaction when the message starts: one
        commit, one fsync, instead of two.

        Raises:
            AlreadyRunningError: another message of this conversation is running.
        """
        with self._transaction(f"start message {seq} of {conversation_id!r}") as db:
            if self._state(db, conversation_id, seq) != MessageState.QUEUED:
                return False
            running = db.execute(
                "SELECT seq FROM messages WHERE conversation_id = ? AND state = 'running'",
                (conversation_id,),
            ).fetchone()
            if running is not None:
                raise AlreadyRunningError(self._path, conversation_id, running[0])
            db.execute(
                "UPDATE messages SET state = 'running', attempts = attempts + 1, started_at = ?"
                " WHERE conversation_id = ? AND seq = ?",
                (now, conversation_id, seq),
            )
            _touch(db, conversation_id, now)
            if event is not None:
                _insert_event(db, conversation_id, event, seq, now)
            return True

    def finish(
        self,
        conversation_id: str,
        seq: int,
        state: MessageState | str,
        *,
        stop_reason: str | None = None,
        error: Mapping[str, Any] | None = None,
        recoverable: bool | None = None,
        now: float,
        log: Sequence[LogEntry] = (),
        event: tuple[str, Any] | None = None,
    ) -> bool:
        """Move a queued or running message to its final ``state``, once.

        ``log`` entries are written in the same transaction whatever happens (a batch of the
        turn's entries); ``event`` (kind, data) only when the state changes, after them.

        False (and nothing changes) when the message is already final. ``done`` needs
        ``stop_reason``; ``failed`` needs ``error`` and ``recoverable``.

        Raises:
            ValueError: ``state`` is not a final state, or a required outcome field is missing.
        """
        final = MessageState(state)
        if not final.is_final:
            raise ValueError(f"{final.value!r} is not a final state")
        if final is MessageState.DONE and stop_reason is None:
            raise ValueError("a done message needs its stop_reason")
        if final is MessageState.FAILED and (error is None or recoverable is None):
            raise ValueError("a failed message needs error and recoverable")
        outcome = (final.value, stop_reason, None if error is None else dumps(dict(error)))
        flag = None if recoverable is None else int(recoverable)
        with self._transaction(f"finish message {seq} of {conversation_id!r}") as db:
            for kind, data, entry_seq in log:
                _insert_event(db, conversation_id, (kind, data), entry_seq, now)
            cursor = db.execute(
                "UPDATE messages SET state = ?, stop_reason = ?, error = ?, recoverable = ?,"
                " finished_at = ? WHERE conversation_id = ? AND seq = ?"
                " AND state IN ('queued', 'running')",
                (*outcome, flag, now, conversation_id, seq),
            )
            if cursor.rowcount == 0:
                self._state(db, conversation_id, seq)  # raises if there is no such message
                return False
            _touch(db, conversation_id, now)
            if event is not None:
                _insert_event(db, conversation_id, event, seq, now)
            return True

    def requeue(self, conversation_id: str, seq: int, *, next: bool, now: float) -> bool:
        """Queue a cancelled, superseded or failed message again (an explicit retry).

        It goes to the end of the queue, or ahead of every queued message with ``next=True``.
        It keeps its seq, content and attempts; its earlier outcome is cleared. False (and
        nothing changes) when it is queued, running or done.
        """
        with self._transaction(f"requeue message {seq} of {conversation_id!r}") as db:
            if self._state(db, conversation_id, seq) not in _RETRYABLE:
                return False
            db.execute(
                "UPDATE messages SET state = 'queued', position = ?, stop_reason = NULL,"
                " error = NULL, recoverable = NULL, started_at = NULL, finished_at = NULL"
                " WHERE conversation_id = ? AND seq = ?",
                (_position(db, conversation_id, next=next), conversation_id, seq),
            )
            _touch(db, conversation_id, now)
            return True

    def recover_after_crash(self, conversation_id: str, *, now: float) -> list[int]:
        """Fail (recoverable) every message left running by a dead bridge; return their seqs.

        Call it once, from the process that takes over the conversation, before prompting.
        Idempotent: a second call finds nothing running and returns ``[]``.
        """
        error = dumps({**BRIDGE_STOPPED_ERROR, "details": {}})
        with self._transaction(f"recover {conversation_id!r} after a crash") as db:
            self._require(db, conversation_id)
            rows = db.execute(
                "SELECT seq FROM messages WHERE conversation_id = ? AND state = 'running'"
                " ORDER BY seq",
                (conversation_id,),
            ).fetchall()
            if rows:
                db.execute(
                    "UPDATE messages SET state = 'failed', error = ?, recoverable = 1,"
                    " finished_at = ? WHERE conversation_id = ? AND state = 'running'",
                    (error, now, conversation_id),
                )
                _touch(db, conversation_id, now)
            return [row[0] for row in rows]

    def messages(
        self, conversation_id: str, states: Iterable[MessageState | str] | None = None
    ) -> list[StoredMessage]:
        """The conversation's messages in seq (creation) order, optionally only some states."""
        wanted = None if states is None else sorted({MessageState(s).value for s in states})
        query = "SELECT * FROM messages WHERE conversation_id = ?"
        if wanted is not None:
            query += f" AND state IN ({', '.join('?' * len(wanted))})"
        with self._transaction("list messages", write=False) as db:
            self._require(db, conversation_id)
            rows = db.execute(query + " ORDER BY seq", (conversation_id, *(wanted or ())))
            return [self._decode(message_from_row, row) for row in rows.fetchall()]

    def get_message(self, conversation_id: str, seq: int) -> StoredMessage | None:
        with self._transaction("read a message", write=False) as db:
            message = self._message(db, conversation_id, seq)
            if message is None:
                self._require(db, conversation_id)
            return message

    # -- the event log ---------------------------------------------------------------------------

    def add_event(
        self, conversation_id: str, kind: str, data: Any, *, seq: int | None = None, now: float
    ) -> int:
        """Append an event (``data`` is any JSON value); return its id (increasing)."""
        body = dumps(data)
        with self._transaction(f"log an event of {conversation_id!r}") as db:
            if seq is None:
                self._require(db, conversation_id)
            else:
                self._state(db, conversation_id, seq)  # raises if there is no such message
            return _insert_event(db, conversation_id, (kind, data), seq, now, body=body)

    def add_events(self, conversation_id: str, entries: Sequence[LogEntry], *, now: float) -> None:
        """Append several events in one transaction (one commit, one fsync)."""
        with self._transaction(f"log events of {conversation_id!r}") as db:
            self._require(db, conversation_id)
            for kind, data, seq in entries:
                _insert_event(db, conversation_id, (kind, data), seq, now)

    def events(
        self, conversation_id: str, after_id: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        """Events with an id above ``after_id``, oldest first, at most ``limit`` of them."""
        with self._transaction("read events", write=False) as db:
            rows = db.execute(
                "SELECT * FROM events WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT ?",
                (conversation_id, after_id, -1 if limit is None else limit),
            ).fetchall()
            if not rows:
                self._require(db, conversation_id)
            return [self._decode(event_from_row, row) for row in rows]

    # -- internals -------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, what: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; sqlite3 errors become QueueStoreError here, once."""
        with self._lock:
            if self._conn is None:
                raise ResourceClosedError(f"the queue store {self._path} is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise QueueStoreError(f"{self._path}: could not {what}: {exc}") from exc

    def _list_conversations(self, *, limit: int) -> list[ConversationRecord]:
        with self._transaction("list conversations", write=False) as db:
            rows = db.execute(
                "SELECT * FROM conversations ORDER BY updated_at DESC, rowid DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [self._decode(conversation_from_row, row) for row in rows]

    def _conversation(self, db: sqlite3.Connection, conversation_id: str) -> ConversationRecord:
        row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        return self._decode(conversation_from_row, row.fetchone())

    def _message(
        self, db: sqlite3.Connection, conversation_id: str, seq: int
    ) -> StoredMessage | None:
        row = db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? AND seq = ?", (conversation_id, seq)
        ).fetchone()
        return None if row is None else self._decode(message_from_row, row)

    def _require(self, db: sqlite3.Connection, conversation_id: str) -> None:
        if db.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone():
            return
        raise UnknownConversationError(self._path, conversation_id)

    def _state(self, db: sqlite3.Connection, conversation_id: str, seq: int) -> MessageState:
        """The message's state; raises UnknownConversationError / UnknownMessageError."""
        row = db.execute(
            "SELECT state FROM messages WHERE conversation_id = ? AND seq = ?",
            (conversation_id, seq),
        ).fetchone()
        if row is None:
            self._require(db, conversation_id)
            raise UnknownMessageError(self._path, conversation_id, seq)
        return self._decode(lambda r: MessageState(r[0]), row)

    def _decode(self, decode: Callable[[sqlite3.Row], _T], row: sqlite3.Row) -> _T:
        try:
            return decode(row)
        except (ValueError, TypeError, KeyError) as exc:
            raise QueueStoreError(f"{self._path}: corrupt record {tuple(row)!r}: {exc}") from exc


def _position(db: sqlite3.Connection, conversation_id: str, *, next: bool) -> int:
    """Where a message joins the queue: after every message, or ahead of every queued one."""
    if next:
        head = db.execute(
            "SELECT MIN(position) FROM messages INDEXED BY messages_queue"
            " WHERE conversation_id = ? AND state = 'queued'",
            (conversation_id,),
        ).fetchone()[0]
        if head is not None:
            return int(head) - 1
    tail = db.execute(
        "SELECT COALESCE(MAX(position), 0) FROM messages WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()[0]
    return int(tail) + 1


def _touch(
    db: sqlite3.Connection, conversation_id: str, now: float, *, unpause: bool = False
) -> None:
    db.execute(
        "UPDATE conversations SET updated_at = MAX(updated_at, ?)"
        + (", paused = 0" if unpause else "")
        + " WHERE id = ?",
        (now, conversation_id),
    )


def _encode_change(name: str, value: Any) -> Any:
    if name in _JSON_FIELDS:
        return dumps(dict(value) if name == "config" else _as_list(value))
    return int(value) if name == "paused" else value


def _as_list(value: Sequence[Any]) -> list[Any]:
    if isinstance(value, str | bytes):  # a Sequence, but never what the caller meant
        raise TypeError(f"expected a list, not {type(value).__name__} {value!r:.40}")
    return list(value)


def _insert_event(
    db: sqlite3.Connection,
    conversation_id: str,
    event: tuple[str, Any],
    seq: int | None,
    now: float,
    *,
    body: str | None = None,
) -> int:
    kind, data = event
    cursor = db.execute(
        "INSERT INTO events (conversation_id, ts, seq, kind, data) VALUES (?, ?, ?, ?, ?)",
        (conversation_id, now, seq, kind, dumps(data) if body is None else body),
    )
    event_id = cursor.lastrowid
    assert event_id is not None  # an INSERT into a rowid table always sets it
    return event_id
