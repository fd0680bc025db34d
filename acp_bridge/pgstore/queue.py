"""The durable FIFO queue of a conversation in PostgreSQL: add a message (any host), read the
queue, and the owner's writes (start a message, finish it once, queue it again, fail what a dead
owner left running), each under the lease's fence.

The semantics are the SQLite store's, method for method (:mod:`acp_bridge.conversation.store`,
:mod:`~acp_bridge.conversation.store_writes`, :mod:`~acp_bridge.conversation.store_reads`):
``seq`` is the creation order (dense per conversation), ``position`` the place in the queue (a
``next=True`` message goes ahead of every queued one), the next message is the queued one with
the lowest position, a final state is set once (``finish`` returns False afterwards), only an
explicit ``requeue`` leaves a final state (not ``done``), at most one message runs, and a
message a dead owner left running becomes failed and recoverable, never prompted again by
itself. Usage is added to the message's and the conversation's totals in the transaction that
finishes the message, so it is never counted twice.

What sharing adds:

- ``add_message`` is not fenced: any host may queue a message into any conversation (a ``send``
  through any host). It is committed when the call returns, and the owner is woken through
  :data:`~.notify.QUEUE_CHANNEL` by the same transaction.
- Every other write takes a :class:`~.lease.Lease` and carries its fence: an owner that lost the
  conversation raises :class:`~.lease.LeaseLostError` and writes nothing.
- Every write transaction first locks the conversation's row, so writers of one conversation
  (concurrent senders, the owner, a take-over) are serialized: ``seq`` and ``position`` are
  computed without a race, and event ids grow in commit order within a conversation.

Time is an argument (``now``, epoch seconds), as in the SQLite store. Errors: psycopg errors
become QueueStoreError naming the store's redacted URL; unknown conversations and messages
raise UnknownConversationError / UnknownMessageError (``get_message`` returns None); bad
states and missing outcome fields raise ValueError.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from acp_bridge.conversation.queue_model import BRIDGE_STOPPED_ERROR
from acp_bridge.conversation.queue_states import RETRYABLE_STATES, MessageRecord, MessageState
from acp_bridge.conversation.records import (
    FinishedTurn,
    StoredMessage,
    dumps,
    loads,
    message_from_row,
    record_from_row,
)
from acp_bridge.conversation.store_catalog import LogEntry
from acp_bridge.conversation.store_sql import as_list
from acp_bridge.conversation.usage import UsageTotals
from acp_bridge.errors import AlreadyRunningError, UnknownConversationError, UnknownMessageError
from acp_bridge.pgstore.connection import Cursor, PgConnection
from acp_bridge.pgstore.lease import FENCE, Lease, fenced, lock_conversation
from acp_bridge.pgstore.notify import notify_queue
from acp_bridge.pgstore.sql import (
    begin_fenced,
    decode,
    head_behind,
    insert_event,
    queue_position,
    touch,
)

__all__ = ["PgQueue"]


class PgQueue:
    """The queue operations of the store behind ``conn`` (thread-safe: one transaction at a
    time; run it in a worker thread from async code)."""

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self._name = conn.name

    # -- any host --------------------------------------------------------------------------------

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
        """Queue a message, committed on return, and wake the owner; return it.

        ``next=True`` puts it ahead of every queued message (behind the queued steers
        ``behind``, kept first in that order); ``unpause=True`` also clears the conversation's
        paused flag in the same transaction; ``steering=True`` stores it ``steering`` (as the
        SQLite store's ``add_message``).

        Raises:
            UnknownConversationError: no such conversation.
        """
        body = dumps(as_list(content))
        state = MessageState.STEERING if steering else MessageState.QUEUED
        with self._conn.transaction(f"add a message to {conversation_id!r}") as cur:
            lock_conversation(cur, self._name, conversation_id)
            cur.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM messages WHERE conversation_id = %s",
                (conversation_id,),
            )
            row = cur.fetchone()
            assert row is not None
            seq = int(row["seq"])
            if next:
                position = head_behind(cur, conversation_id, behind)
            else:
                position = queue_position(cur, conversation_id, next=False)
            cur.execute(
                "INSERT INTO messages (conversation_id, seq, position, content, state, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (conversation_id, seq, position, body, state.value, now),
            )
            cur.execute(
                "UPDATE conversations SET updated_at = GREATEST(updated_at, %s)"
                + (", paused = false" if unpause else "")
                + " WHERE id = %s",
                (now, conversation_id),
            )
            notify_queue(cur, conversation_id)
        return StoredMessage(
            conversation_id=conversation_id,
            seq=seq,
            position=position,
            content=loads(body, list),
            state=state,
            stop_reason=None,
            error=None,
            recoverable=None,
            attempts=0,
            created_at=now,
            started_at=None,
            finished_at=None,
        )

    def next_queued(self, conversation_id: str) -> StoredMessage | None:
        """The queued message with the lowest position, or None (an index lookup)."""
        with self._conn.transaction("find the next queued message") as cur:
            cur.execute(
                "SELECT * FROM messages WHERE conversation_id = %s AND state = 'queued'"
                " ORDER BY position LIMIT 1",
                (conversation_id,),
            )
            row = cur.fetchone()
            if row is None:
                self._require(cur, conversation_id)
                return None
            return decode(self._name, message_from_row, row)

    def queued(self, conversation_id: str) -> list[StoredMessage]:
        """Every queued message in prompt order."""
        with self._conn.transaction("list the queue") as cur:
            self._require(cur, conversation_id)
            cur.execute(
                "SELECT * FROM messages WHERE conversation_id = %s AND state = 'queued'"
                " ORDER BY position",
                (conversation_id,),
            )
            return [decode(self._name, message_from_row, row) for row in cur.fetchall()]

    def messages(
        self, conversation_id: str, states: Iterable[MessageState | str] | None = None
    ) -> list[StoredMessage]:
        """The conversation's messages in seq (creation) order, optionally only some states."""
        wanted = None if states is None else sorted({MessageState(s).value for s in states})
        with self._conn.transaction("list messages") as cur:
            self._require(cur, conversation_id)
            cur.execute(
                "SELECT * FROM messages WHERE conversation_id = %s"
                " AND (%s::text[] IS NULL OR state = ANY(%s::text[])) ORDER BY seq",
                (conversation_id, wanted, wanted),
            )
            return [decode(self._name, message_from_row, row) for row in cur.fetchall()]

    def queue_state(self, conversation_id: str) -> tuple[list[MessageRecord], dict[int, list[Any]]]:
        """What resuming a conversation's queue needs, as the SQLite store's ``queue_state``:
        every message as the queue machine sees it, in prompt order (the others by seq, then
        the queued ones by position), and the content of the queued ones by seq. Replies and
        the content of finished messages are never read."""
        with self._conn.transaction("read the queue") as cur:
            self._require(cur, conversation_id)
            cur.execute(
                "SELECT seq, position, state, stop_reason, error, recoverable, attempts,"
                " CASE WHEN state = 'queued' THEN content END AS content"
                " FROM messages WHERE conversation_id = %s ORDER BY seq",
                (conversation_id,),
            )
            rows = cur.fetchall()
        history: list[MessageRecord] = []
        queued: list[tuple[int, MessageRecord]] = []
        prompts: dict[int, list[Any]] = {}
        for row in rows:
            record = decode(self._name, record_from_row, row)
            if record.state is MessageState.QUEUED:
                queued.append((int(row["position"]), record))
                prompts[record.seq] = decode(self._name, lambda r: loads(r["content"], list), row)
            else:
                history.append(record)
        queued.sort(key=lambda item: item[0])
        return history + [record for _, record in queued], prompts

    def get_message(self, conversation_id: str, seq: int) -> StoredMessage | None:
        with self._conn.transaction("read a message") as cur:
            message = self._message(cur, conversation_id, seq)
            if message is None:
                self._require(cur, conversation_id)
            return message

    # -- the owner, under its lease's fence ------------------------------------------------------

    def mark_running(
        self, lease: Lease, seq: int, *, now: float, event: tuple[str, Any] | None = None
    ) -> bool:
        """queued -> running, counting an attempt. False if the message is no longer queued.
        ``event`` (kind, data) is logged in the same transaction.

        Raises:
            AlreadyRunningError: another message of this conversation is running.
            LeaseLostError: the lease is lost; nothing was written.
        """
        cid = lease.conversation_id
        with self._conn.transaction(f"start message {seq} of {cid!r}") as cur:
            begin_fenced(cur, self._name, lease)
            if self._state(cur, cid, seq) is not MessageState.QUEUED:
                return False
            cur.execute(
                "SELECT seq FROM messages WHERE conversation_id = %s AND state = 'running'",
                (cid,),
            )
            running = cur.fetchone()
            if running is not None:
                raise AlreadyRunningError(self._name, cid, int(running["seq"]))
            fenced(
                cur,
                self._name,
                lease,
                "UPDATE messages SET state = 'running', attempts = attempts + 1,"
                " started_at = %(now)s"
                f" WHERE conversation_id = %(cid)s AND seq = %(seq)s AND {FENCE}",
                {"now": now, "cid": cid, "seq": seq},
            )
            touch(cur, self._name, lease, now)
            if event is not None:
                insert_event(cur, self._name, lease, event, seq, now)
            return True

    def finish(
        self,
        lease: Lease,
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
        """Move a queued, running or steering message to its final ``state``, once (as the
        SQLite store's ``finish``: ``log`` written whatever happens, ``event`` and ``turn`` only
        when the state changes; ``steered_into`` stored when there is no ``turn``). False when
        the message already was final.

        Raises:
            ValueError: ``state`` is not final, or a required outcome field is missing.
            LeaseLostError: the lease is lost; nothing was written.
        """
        final = MessageState(state)
        if not final.is_final:
            raise ValueError(f"{final.value!r} is not a final state")
        if final is MessageState.DONE and stop_reason is None:
            raise ValueError("a done message needs its stop_reason")
        if final is MessageState.FAILED and (error is None or recoverable is None):
            raise ValueError("a failed message needs error and recoverable")
        cid = lease.conversation_id
        values = {
            "state": final.value,
            "stop_reason": stop_reason,
            "error": None if error is None else dumps(dict(error)),
            "recoverable": recoverable,
            "now": now,
            "cid": cid,
            "seq": seq,
            "reply": None if turn is None else turn.reply,
            "truncated": False if turn is None else turn.reply_truncated,
            "with_reply": turn is not None,
            "steered_into": steered_into,
        }
        with self._conn.transaction(f"finish message {seq} of {cid!r}") as cur:
            begin_fenced(cur, self._name, lease)
            for kind, data, entry_seq in log:
                insert_event(cur, self._name, lease, (kind, data), entry_seq, now)
            changed = fenced(
                cur,
                self._name,
                lease,
                "UPDATE messages SET state = %(state)s, stop_reason = %(stop_reason)s,"
                " error = %(error)s, recoverable = %(recoverable)s, finished_at = %(now)s,"
                " reply = CASE WHEN %(with_reply)s THEN %(reply)s ELSE reply END,"
                " reply_truncated = CASE WHEN %(with_reply)s THEN %(truncated)s"
                " ELSE reply_truncated END,"
                " steered_into = CASE WHEN %(with_reply)s THEN steered_into"
                " ELSE %(steered_into)s END"
                " WHERE conversation_id = %(cid)s AND seq = %(seq)s"
                f" AND state IN ('queued', 'running', 'steering') AND {FENCE}",
                values,
            )
            if changed == 0:
                self._state(cur, cid, seq)  # raises if there is no such message
                return False
            touch(cur, self._name, lease, now)
            if turn is not None:
                self._record_usage(cur, lease, seq, turn)
            if event is not None:
                insert_event(cur, self._name, lease, event, seq, now)
            return True

    def requeue(
        self, lease: Lease, seq: int, *, next: bool, now: float, unpause: bool = False
    ) -> bool:
        """Queue a cancelled, superseded or failed message again (an explicit retry), at the
        end or ahead of every queued message; its outcome and reply are cleared, its attempts
        and usage kept. False when it is queued, running or done.

        Raises:
            LeaseLostError: the lease is lost; nothing was written.
        """
        cid = lease.conversation_id
        with self._conn.transaction(f"requeue message {seq} of {cid!r}") as cur:
            begin_fenced(cur, self._name, lease)
            if self._state(cur, cid, seq) not in RETRYABLE_STATES:
                return False
            fenced(
                cur,
                self._name,
                lease,
                "UPDATE messages SET state = 'queued', position = %(position)s,"
                " stop_reason = NULL, error = NULL, recoverable = NULL, started_at = NULL,"
                " finished_at = NULL, reply = NULL, reply_truncated = false"
                f" WHERE conversation_id = %(cid)s AND seq = %(seq)s AND {FENCE}",
                {"position": queue_position(cur, cid, next=next), "cid": cid, "seq": seq},
            )
            touch(cur, self._name, lease, now)
            if unpause:
                fenced(
                    cur,
                    self._name,
                    lease,
                    f"UPDATE conversations SET paused = false WHERE id = %(cid)s AND {FENCE}",
                    {"cid": cid},
                )
            return True

    def steer_refused(
        self,
        lease: Lease,
        seq: int,
        *,
        behind: Sequence[int] = (),
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool:
        """A ``steering`` message the agent did not take goes ``queued`` to the queue's head,
        behind the queued steers ``behind`` (as the SQLite store's ``steer_refused``). False
        when it is not ``steering``.

        Raises:
            LeaseLostError: the lease is lost; nothing was written.
        """
        cid = lease.conversation_id
        with self._conn.transaction(f"requeue steer {seq} of {cid!r}") as cur:
            begin_fenced(cur, self._name, lease)
            if self._state(cur, cid, seq) is not MessageState.STEERING:
                return False
            fenced(
                cur,
                self._name,
                lease,
                "UPDATE messages SET state = 'queued', position = %(position)s"
                f" WHERE conversation_id = %(cid)s AND seq = %(seq)s AND {FENCE}",
                {"position": head_behind(cur, cid, behind), "cid": cid, "seq": seq},
            )
            touch(cur, self._name, lease, now)
            if event is not None:
                insert_event(cur, self._name, lease, event, seq, now)
            return True

    def recover_after_crash(self, lease: Lease, *, now: float) -> list[int]:
        """Fail (recoverable) every message a dead owner left running; return their seqs.
        Call it once after acquiring the lease, before prompting. Idempotent.

        Raises:
            LeaseLostError: the lease is lost; nothing was written.
        """
        cid = lease.conversation_id
        error = dumps({**BRIDGE_STOPPED_ERROR, "details": {}})
        with self._conn.transaction(f"recover {cid!r} after a crash") as cur:
            begin_fenced(cur, self._name, lease)
            cur.execute(
                "SELECT seq FROM messages WHERE conversation_id = %s AND state = 'running'"
                " ORDER BY seq",
                (cid,),
            )
            seqs = [int(row["seq"]) for row in cur.fetchall()]
            if seqs:
                fenced(
                    cur,
                    self._name,
                    lease,
                    "UPDATE messages SET state = 'failed', error = %(error)s, recoverable = true,"
                    " finished_at = %(now)s"
                    f" WHERE conversation_id = %(cid)s AND state = 'running' AND {FENCE}",
                    {"error": error, "now": now, "cid": cid},
                )
                touch(cur, self._name, lease, now)
            return seqs

    # -- internals -------------------------------------------------------------------------------

    def _record_usage(self, cur: Cursor, lease: Lease, seq: int, turn: FinishedTurn) -> None:
        """Add what the turn spent to its message's and its conversation's totals, and store
        the cost meter after it (as the SQLite store does), under the fence."""
        cid = lease.conversation_id
        if not turn.usage.is_empty:
            cur.execute(
                "SELECT usage FROM messages WHERE conversation_id = %s AND seq = %s", (cid, seq)
            )
            spent = decode(
                self._name, lambda r: UsageTotals.from_json(loads(r["usage"], dict)), cur.fetchone()
            )
            fenced(
                cur,
                self._name,
                lease,
                "UPDATE messages SET usage = %(usage)s"
                f" WHERE conversation_id = %(cid)s AND seq = %(seq)s AND {FENCE}",
                {"usage": dumps(spent.plus(turn.usage).to_json()), "cid": cid, "seq": seq},
            )
        elif not turn.meter_changed:
            return
        cur.execute("SELECT usage FROM conversations WHERE id = %s", (cid,))
        total = decode(
            self._name, lambda r: UsageTotals.from_json(loads(r["usage"], dict)), cur.fetchone()
        )
        totals = {**total.plus(turn.usage).to_json(), "meter": turn.meter.to_json()}
        fenced(
            cur,
            self._name,
            lease,
            f"UPDATE conversations SET usage = %(usage)s WHERE id = %(cid)s AND {FENCE}",
            {"usage": dumps(totals), "cid": cid},
        )

    def _require(self, cur: Cursor, conversation_id: str) -> None:
        cur.execute("SELECT 1 FROM conversations WHERE id = %s", (conversation_id,))
        if cur.fetchone() is None:
            raise UnknownConversationError(self._name, conversation_id)

    def _message(self, cur: Cursor, conversation_id: str, seq: int) -> StoredMessage | None:
        cur.execute(
            "SELECT * FROM messages WHERE conversation_id = %s AND seq = %s",
            (conversation_id, seq),
        )
        row = cur.fetchone()
        return None if row is None else decode(self._name, message_from_row, row)

    def _state(self, cur: Cursor, conversation_id: str, seq: int) -> MessageState:
        """The message's state; raises UnknownConversationError / UnknownMessageError."""
        cur.execute(
            "SELECT state FROM messages WHERE conversation_id = %s AND seq = %s",
            (conversation_id, seq),
        )
        row = cur.fetchone()
        if row is None:
            self._require(cur, conversation_id)
            raise UnknownMessageError(self._name, conversation_id, seq)
        return decode(self._name, lambda r: MessageState(r["state"]), row)
