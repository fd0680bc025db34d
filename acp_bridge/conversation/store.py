"""The durable FIFO queue and turn log of the conversation layer, in SQLite.

:class:`QueueStore` is synchronous and thread-safe: one connection (``check_same_thread=False``)
guarded by a lock, so async callers may run it in a worker thread. It imports no anyio.

Durability. The file is in WAL mode and every mutating call is one committed ``BEGIN IMMEDIATE``
transaction (or part of one batch, see :meth:`~.store_base.StoreBase.batch`). What a returned
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
when nothing would make it wait (:meth:`~.store_base.StoreBase.commit_now_if_free`).

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

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from acp_bridge.conversation.queue_model import BRIDGE_STOPPED_ERROR
from acp_bridge.conversation.records import (
    ConversationRecord,
    ConversationSummary,
    EventRecord,
    FinishedTurn,
    MessageState,
    StoredMessage,
    dumps,
    loads,
)
from acp_bridge.conversation.schema import connect
from acp_bridge.conversation.store_catalog import ConversationChanges, LogEntry
from acp_bridge.conversation.store_reads import QueueReads
from acp_bridge.conversation.store_sql import (
    as_list,
    create_private,
    insert_event,
    queue_position,
    touch,
)
from acp_bridge.conversation.usage import Usage
from acp_bridge.errors import (
    AlreadyRunningError,
    UnknownConversationError,
    UnknownMessageError,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "DURABILITIES",
    "AlreadyRunningError",
    "ConversationChanges",
    "ConversationRecord",
    "ConversationSummary",
    "Durability",
    "EventRecord",
    "FinishedTurn",
    "LogEntry",
    "MessageState",
    "QueueStore",
    "StoredMessage",
    "UnknownConversationError",
    "UnknownMessageError",
]

Durability = Literal["process", "power"]
"""What a returned commit survives: a crash of the bridge process, or also a power loss."""
DURABILITIES: Final[tuple[Durability, ...]] = ("process", "power")

# How long a write waits for another process's write transaction before failing.
BUSY_TIMEOUT_S: Final = 10.0
_RETRYABLE: Final = (MessageState.CANCELLED, MessageState.SUPERSEDED, MessageState.FAILED)


class QueueStore(QueueReads):
    """Conversations, their message queues and their event logs in one SQLite file.

    The parts: the connection (:mod:`.store_base`), conversations and event logs
    (:mod:`.store_catalog`), reading the queue (:mod:`.store_reads`), changing it (here), the
    SQL itself (:mod:`.store_sql`)."""

    @classmethod
    def open(cls, path: Path | str, *, durability: Durability = "process") -> QueueStore:
        """Open (creating if needed) and migrate the store at ``path`` (``":memory:"`` for tests).

        ``durability``: what each commit survives once it returned (see the module's text).

        Raises:
            QueueStoreError: the file cannot be opened, is not an SQLite database (corrupt), is
                not an acp-bridge store, or was written by a newer acp-bridge.
        """
        name = str(path)
        if name != ":memory:" and not name.startswith("file:"):
            create_private(name)
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be one of {DURABILITIES}, not {durability!r}")
        fsync = durability == "power"
        return cls(connect(name, busy_timeout_s=BUSY_TIMEOUT_S, fsync=fsync), name, fsync=fsync)

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
        """Queue a message (committed on return) and return it.

        ``next=True`` puts it ahead of every queued message; ``unpause=True`` also clears the
        conversation's paused flag in the same transaction (a new send after a stop resumes).
        """
        body = dumps(as_list(content))
        with self._transaction(f"add a message to {conversation_id!r}") as db:
            self._require(db, conversation_id)
            seq: int = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()[0]
            position = queue_position(db, conversation_id, next=next)
            db.execute(
                "INSERT INTO messages (conversation_id, seq, position, content, state, created_at)"
                " VALUES (?, ?, ?, ?, 'queued', ?)",
                (conversation_id, seq, position, body, now),
            )
            touch(db, conversation_id, now, unpause=unpause)
        # As the row now reads (the content through JSON, as a read gives it), without reading
        # it back.
        return StoredMessage(
            conversation_id=conversation_id,
            seq=seq,
            position=position,
            content=loads(body, list),
            state=MessageState.QUEUED,
            stop_reason=None,
            error=None,
            recoverable=None,
            attempts=0,
            created_at=now,
            started_at=None,
            finished_at=None,
        )

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
        commit instead of two.

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
            touch(db, conversation_id, now)
            if event is not None:
                insert_event(db, conversation_id, event, seq, now)
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
        turn: FinishedTurn | None = None,
    ) -> bool:
        """Move a queued or running message to its final ``state``, once.

        ``log`` entries are written in the same transaction whatever happens (a batch of the
        turn's entries); ``event`` (kind, data) only when the state changes, after them.
        ``turn`` (the turn that ran: its reply, usage and cost meter) is recorded only when the
        state changes, in the same transaction: its usage is added to the message's and the
        conversation's exactly once.

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
                insert_event(db, conversation_id, (kind, data), entry_seq, now)
            key = (conversation_id, seq)
            if turn is None:
                cursor = db.execute(
                    "UPDATE messages SET state = ?, stop_reason = ?, error = ?, recoverable = ?,"
                    " finished_at = ? WHERE conversation_id = ? AND seq = ?"
                    " AND state IN ('queued', 'running')",
                    (*outcome, flag, now, *key),
                )
            else:  # its reply with it, in the same statement
                cursor = db.execute(
                    "UPDATE messages SET state = ?, stop_reason = ?, error = ?, recoverable = ?,"
                    " finished_at = ?, reply = ?, reply_truncated = ?"
                    " WHERE conversation_id = ? AND seq = ? AND state IN ('queued', 'running')",
                    (*outcome, flag, now, turn.reply, int(turn.reply_truncated), *key),
                )
            if cursor.rowcount == 0:
                self._state(db, conversation_id, seq)  # raises if there is no such message
                return False
            touch(db, conversation_id, now)
            if turn is not None:
                self._record_usage(db, conversation_id, seq, turn)
            if event is not None:
                insert_event(db, conversation_id, event, seq, now)
            return True

    def requeue(
        self, conversation_id: str, seq: int, *, next: bool, now: float, unpause: bool = False
    ) -> bool:
        """Queue a cancelled, superseded or failed message again (an explicit retry).

        It goes to the end of the queue, or ahead of every queued message with ``next=True``;
        ``unpause=True`` also clears the conversation's paused flag in the same transaction (a
        retry after a stop resumes, as a send does).
        It keeps its seq, content, attempts and usage (that was spent); its earlier outcome
        and reply are cleared. False (and
        nothing changes) when it is queued, running or done.
        """
        with self._transaction(f"requeue message {seq} of {conversation_id!r}") as db:
            if self._state(db, conversation_id, seq) not in _RETRYABLE:
                return False
            db.execute(
                "UPDATE messages SET state = 'queued', position = ?, stop_reason = NULL,"
                " error = NULL, recoverable = NULL, started_at = NULL, finished_at = NULL,"
                " reply = NULL, reply_truncated = 0"
                " WHERE conversation_id = ? AND seq = ?",
                (queue_position(db, conversation_id, next=next), conversation_id, seq),
            )
            touch(db, conversation_id, now, unpause=unpause)
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
                touch(db, conversation_id, now)
            return [row[0] for row in rows]

    # -- internals -------------------------------------------------------------------------------

    def _record_usage(
        self, db: sqlite3.Connection, conversation_id: str, seq: int, turn: FinishedTurn
    ) -> None:
        """Add what the turn spent to its message's and its conversation's totals, and store
        the cost meter after it. A turn that spent nothing and left the meter as it found it
        changes neither (most turns of an agent that reports no usage)."""
        if not turn.usage.is_empty:
            key = (conversation_id, seq)
            row = db.execute(
                "SELECT usage FROM messages WHERE conversation_id = ? AND seq = ?", key
            )
            spent = self._decode(lambda r: Usage.from_json(loads(r[0], dict)), row.fetchone())
            db.execute(
                "UPDATE messages SET usage = ? WHERE conversation_id = ? AND seq = ?",
                (dumps(spent.plus(turn.usage).to_json()), *key),
            )
        elif not turn.meter_changed:
            return
        row = db.execute("SELECT usage FROM conversations WHERE id = ?", (conversation_id,))
        total = self._decode(lambda r: Usage.from_json(loads(r[0], dict)), row.fetchone())
        totals = {**total.plus(turn.usage).to_json(), "meter": turn.meter.to_json()}
        db.execute(
            "UPDATE conversations SET usage = ? WHERE id = ?", (dumps(totals), conversation_id)
        )
