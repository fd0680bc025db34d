"""The durable FIFO queue and turn log of the conversation layer, in SQLite.

:class:`QueueStore` is synchronous and thread-safe: one connection (``check_same_thread=False``)
guarded by a lock, so async callers may run it in a worker thread. It imports no anyio.

Durability. The file is in WAL mode and every mutating call is one committed ``BEGIN IMMEDIATE``
transaction (or part of one batch, see :meth:`~QueueStore.batch`). What a returned
commit survives is the store's :data:`Durability`, chosen at :meth:`QueueStore.open`:

- ``"process"`` (the default, ``synchronous=NORMAL``): the commit is in the WAL, handed to the
  operating system. It survives a crash or SIGKILL of the bridge, which is what the queue
  promises: a message is durable when :meth:`QueueStore.add_message` returns, and a message
  marked running is never prompted again by a restarted bridge. A power loss or kernel crash
  can roll back the latest commits (never corrupting the file; the WAL is fsynced at each
  checkpoint).
- ``"power"`` (``synchronous=FULL``): every commit is also fsynced before it returns, so it
  survives a power loss too (as far as the disk honours fsync), for one fsync per commit.

``BEGIN IMMEDIATE`` plus ``busy_timeout`` lets several processes share a file safely.

Checkpoints (copying the WAL back into the file, where ``synchronous=NORMAL`` fsyncs) run in a
thread and a connection of their own (:class:`~acp_bridge.sqlite_wal.WalCheckpointer`), so no
commit waits for one; that is also what lets an async caller commit on its event loop's thread
when nothing would make it wait (:meth:`~QueueStore.commit_now_if_free`).

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

Privacy and trust (issue 21). The store holds prompts, and decides what is prompted next. A
store file that :meth:`QueueStore.open` creates is mode 0600 whatever the umask, created
``O_EXCL | O_NOFOLLOW`` (never through a symbolic link, even a dangling one); SQLite gives its
``-wal`` and ``-shm`` files the main file's mode; an existing file keeps the mode its owner
chose. A store that is not a regular file of yours, that another user can write, or that lives in
a directory where another user can swap files, is refused before SQLite opens it, and so are
``-wal`` and ``-shm`` files that are not yours; after SQLite opened it, the path is checked to
still name the file checked (see :mod:`.store_file`, which also says what race remains). A file
that is not an acp-bridge store is refused before anything in it changes (see :mod:`.schema`).

Reading only. ``QueueStore.open(path, read_only=True)`` changes nothing in or beside the file (no
WAL switch, no migration: SQLite's ``mode=ro``, or ``immutable`` where no ``-wal`` can exist), so
a store you may read but not write can be listed and shown; every write then raises
QueueStoreError.

Removed or replaced under a live process. Before each commit the store checks that its path
still names the file it has open; if not, the commit is rolled back and raises
:class:`~acp_bridge.errors.StoreReplacedError`: nothing is reported committed that is not in the
store at its path.

The parts. :class:`QueueStore` is a facade over parts that share one
:class:`~.store_connection.StoreConnection` (the connection, its lock and transactions, group
commits, checkpoints, closing): :class:`~.store_catalog.ConversationCatalog` (conversations and
their event logs), :class:`~.store_reads.QueueReads` (reading the queue),
:class:`~.store_writes.QueueWrites` (changing it), with the row lookups they share in
:class:`~.store_rows.StoredRows` and the SQL statement groups in :mod:`.store_sql`. Each method
of the facade hands its call to the one part that does that job.

Errors. Every ``sqlite3.Error`` becomes :class:`QueueStoreError` naming the file and what failed,
``from`` the original. A conversation or message that does not exist raises
:class:`UnknownConversationError` / :class:`UnknownMessageError` (``get_*`` return None instead);
bad state names and missing outcome fields raise ValueError; use after :meth:`~QueueStore.close`
raises ResourceClosedError.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self, Unpack

from acp_bridge.conversation.queue_states import MessageRecord, MessageState
from acp_bridge.conversation.records import (
    ConversationRecord,
    ConversationSummary,
    EventRecord,
    FinishedTurn,
    StoredMessage,
)
from acp_bridge.conversation.schema import connect, connect_read_only
from acp_bridge.conversation.store_catalog import ConversationCatalog, ConversationChanges, LogEntry
from acp_bridge.conversation.store_connection import StoreConnection
from acp_bridge.conversation.store_file import StoreFile, is_file_path
from acp_bridge.conversation.store_import import ConversationImport
from acp_bridge.conversation.store_reads import QueueReads
from acp_bridge.conversation.store_rows import StoredRows
from acp_bridge.conversation.store_writes import QueueWrites

__all__ = ["BUSY_TIMEOUT_S", "DURABILITIES", "Durability", "QueueStore"]

Durability = Literal["process", "power"]
"""What a returned commit survives: a crash of the bridge process, or also a power loss."""
DURABILITIES: Final[tuple[Durability, ...]] = ("process", "power")

# How long a write waits for another process's write transaction before failing.
BUSY_TIMEOUT_S: Final = 10.0


class QueueStore:
    """Conversations, their message queues and their event logs in one SQLite file.

    A facade: each method is done by one of the parts listed in the module's text, which share
    one connection."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        *,
        fsync: bool = False,
        file: StoreFile | None = None,
        read_only: bool = False,
    ) -> None:
        """Use :meth:`open`. ``fsync``: the connection fsyncs every commit
        (``synchronous=FULL``). ``file``: the store's file as checked at the open.
        ``read_only``: every write is refused."""
        self._connection = StoreConnection(conn, path, fsync=fsync, file=file, read_only=read_only)
        rows = StoredRows(path)
        self._catalog = ConversationCatalog(self._connection, rows)
        self._reads = QueueReads(self._connection, rows)
        self._writes = QueueWrites(self._connection, rows)
        self._import = ConversationImport(self._connection)

    @classmethod
    def open(
        cls, path: Path | str, *, durability: Durability = "process", read_only: bool = False
    ) -> QueueStore:
        """Open (creating if needed) and migrate the store at ``path`` (``":memory:"`` for tests).

        ``durability``: what each commit survives once it returned (see the module's text).
        ``read_only``: open an existing store for reading only, changing nothing (see the
        module's text).

        Raises:
            QueueStoreError: the file is refused (not a private file of yours, see the module's
                text), cannot be opened, is not an SQLite database (corrupt), is not an
                acp-bridge store, or was written by a newer acp-bridge; with ``read_only``, also
                when there is no file at ``path``.
        """
        name = str(path)
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
        fsync = durability == "power"
        file = StoreFile.prepare(name, create=not read_only) if is_file_path(name) else None
        if read_only:
            conn = connect_read_only(name, busy_timeout_s=BUSY_TIMEOUT_S)
        else:
            conn = connect(name, busy_timeout_s=BUSY_TIMEOUT_S, fsync=fsync)
        if file is not None:
            try:
                file.verify_opened(wal_expected=not read_only)
            except BaseException:
                conn.close()
                raise
        return cls(conn, name, fsync=fsync, file=file, read_only=read_only)

    # -- the connection (StoreConnection) ---------------------------------------------------------

    @property
    def path(self) -> str:
        return self._connection.path

    @property
    def is_shared(self) -> bool:
        """False: one file, whose owner process learns of new messages from its own sends
        (another process's send reaches it through its socket, see host/owner.py)."""
        return False

    def close(self) -> None:
        """Close the connection (the last one to the file checkpoints it). Idempotent."""
        self._connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "OPEN" if self._connection.is_open else "CLOSED"
        return f"<{type(self).__name__} {self.path} [{state}]>"

    def batch(self, what: str = "commit a batch of changes") -> AbstractContextManager[None]:
        """Every call of this thread inside the block is one transaction, one commit, all or
        nothing (:meth:`.StoreConnection.batch`)."""
        return self._connection.batch(what)

    def commit_now_if_free(self, work: Callable[[], bool]) -> bool:
        """Run ``work`` in one transaction at once, in this thread, if that cannot wait; False
        when it would have to (:meth:`.StoreConnection.commit_now_if_free`)."""
        return self._connection.commit_now_if_free(work)

    # -- conversations and event logs (ConversationCatalog) ---------------------------------------

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
        """Store a new conversation (:meth:`.ConversationCatalog.create_conversation`)."""
        return self._catalog.create_conversation(
            conversation_id,
            agent=agent,
            cwd=cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            config=config,
            title=title,
            now=now,
        )

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        return self._catalog.get_conversation(conversation_id)

    def latest_conversation(self) -> ConversationRecord | None:
        """The most recently updated conversation (ties: the one created last)."""
        return self._catalog.latest_conversation()

    def latest_resumable(
        self, cwd: str | None, argv: Sequence[str] | None = None
    ) -> ConversationRecord | None:
        """The latest conversation in ``cwd`` with agent command ``argv`` that started a
        session (:meth:`.ConversationCatalog.latest_resumable`)."""
        return self._catalog.latest_resumable(cwd, argv)

    def list_conversations(self) -> list[ConversationRecord]:
        """Every conversation, most recently updated first."""
        return self._catalog.list_conversations()

    def conversation_summaries(self) -> list[ConversationSummary]:
        """Every conversation with its message counts by state, most recently updated first."""
        return self._catalog.conversation_summaries()

    def find_conversations(self, prefix: str) -> list[str]:
        """The ids that start with ``prefix`` (an exact id first, alone), at most 10."""
        return self._catalog.find_conversations(prefix)

    def delete_conversation(self, conversation_id: str) -> bool:
        """Delete a conversation, its messages and its events; False when there was none
        (:meth:`.ConversationCatalog.delete_conversation`)."""
        return self._catalog.delete_conversation(conversation_id)

    def update_conversation(
        self, conversation_id: str, *, now: float, **changes: Unpack[ConversationChanges]
    ) -> ConversationRecord:
        """Change only the fields given (:meth:`.ConversationCatalog.update_conversation`)."""
        return self._catalog.update_conversation(conversation_id, now=now, **changes)

    def add_event(
        self, conversation_id: str, kind: str, data: Any, *, seq: int | None = None, now: float
    ) -> int:
        """Append an event; return its id (:meth:`.ConversationCatalog.add_event`)."""
        return self._catalog.add_event(conversation_id, kind, data, seq=seq, now=now)

    def add_events(
        self, conversation_id: str, entries: Sequence[LogEntry], *, now: float
    ) -> list[int]:
        """Append several events in one transaction (one commit, one fsync); their ids."""
        return self._catalog.add_events(conversation_id, entries, now=now)

    def events(
        self, conversation_id: str, after_id: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        """Events with an id above ``after_id``, oldest first, at most ``limit`` of them."""
        return self._catalog.events(conversation_id, after_id, limit)

    def last_event_id(self, conversation_id: str) -> int:
        """The id of the conversation's latest event, 0 if none (a log reader's start)."""
        return self._catalog.last_event_id(conversation_id)

    # -- reading the queue (QueueReads) ------------------------------------------------------------

    def next_queued(self, conversation_id: str) -> StoredMessage | None:
        """The queued message with the lowest position, or None: an index lookup, never a
        scan."""
        return self._reads.next_queued(conversation_id)

    def queued(self, conversation_id: str) -> list[StoredMessage]:
        """Every queued message in prompt order (:meth:`.QueueReads.queued`)."""
        return self._reads.queued(conversation_id)

    def messages(
        self, conversation_id: str, states: Iterable[MessageState | str] | None = None
    ) -> list[StoredMessage]:
        """The conversation's messages in seq order, optionally only some states."""
        return self._reads.messages(conversation_id, states)

    def queue_state(self, conversation_id: str) -> tuple[list[MessageRecord], dict[int, list[Any]]]:
        """What resuming a conversation's queue needs (:meth:`.QueueReads.queue_state`)."""
        return self._reads.queue_state(conversation_id)

    def get_message(self, conversation_id: str, seq: int) -> StoredMessage | None:
        return self._reads.get_message(conversation_id, seq)

    # -- changing the queue (QueueWrites) ----------------------------------------------------------

    def add_message(
        self,
        conversation_id: str,
        content: Sequence[Any],
        *,
        next: bool = False,
        unpause: bool = False,
        steering: bool = False,
        behind: Sequence[int] = (),
        now: float,
    ) -> StoredMessage:
        """Queue a message, committed on return (:meth:`.QueueWrites.add_message`)."""
        return self._writes.add_message(
            conversation_id,
            content,
            next=next,
            unpause=unpause,
            steering=steering,
            behind=behind,
            now=now,
        )

    def mark_running(
        self,
        conversation_id: str,
        seq: int,
        *,
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool:
        """queued -> running, counting an attempt (:meth:`.QueueWrites.mark_running`)."""
        return self._writes.mark_running(conversation_id, seq, now=now, event=event)

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
        turn: FinishedTurn | None = None,
        steered_into: int | None = None,
    ) -> bool:
        """Move a queued, running or steering message to its final ``state``, once; False when
        it already was final (:meth:`.QueueWrites.finish`)."""
        return self._writes.finish(
            conversation_id,
            seq,
            state,
            stop_reason=stop_reason,
            error=error,
            recoverable=recoverable,
            now=now,
            log=log,
            event=event,
            turn=turn,
            steered_into=steered_into,
        )

    def requeue(
        self, conversation_id: str, seq: int, *, next: bool, now: float, unpause: bool = False
    ) -> bool:
        """Queue a cancelled, superseded or failed message again (:meth:`.QueueWrites.requeue`)."""
        return self._writes.requeue(conversation_id, seq, next=next, now=now, unpause=unpause)

    def steer_refused(
        self,
        conversation_id: str,
        seq: int,
        *,
        behind: Sequence[int] = (),
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool:
        """A steering message the agent did not take goes to the queue's head
        (:meth:`.QueueWrites.steer_refused`)."""
        return self._writes.steer_refused(conversation_id, seq, behind=behind, now=now, event=event)

    def recover_after_crash(self, conversation_id: str, *, now: float) -> list[int]:
        """Fail (recoverable) every message left running by a dead bridge; return their seqs
        (:meth:`.QueueWrites.recover_after_crash`)."""
        return self._writes.recover_after_crash(conversation_id, now=now)

    # -- copying (ConversationImport) -------------------------------------------------------------

    def import_conversation(
        self,
        record: ConversationRecord,
        messages: Sequence[StoredMessage],
        events: Sequence[EventRecord],
    ) -> bool:
        """Store a conversation copied from another store, as it was, in one transaction;
        False when one with its id is here already
        (:meth:`.ConversationImport.import_conversation`)."""
        return self._import.import_conversation(record, messages, events)
