"""The queue store's changes to the queue: add a message, start it, finish it once, queue it
again for a retry or after a refused steer, and fail what a dead bridge left running. See
:mod:`.store` for the whole story (the states, the exactly-once guarantee, crash recovery)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from acp_bridge.conversation.queue_model import BRIDGE_STOPPED_ERROR
from acp_bridge.conversation.queue_states import RETRYABLE_STATES, MessageState
from acp_bridge.conversation.records import FinishedTurn, StoredMessage, dumps, loads
from acp_bridge.conversation.store_catalog import LogEntry
from acp_bridge.conversation.store_connection import StoreConnection
from acp_bridge.conversation.store_rows import StoredRows
from acp_bridge.conversation.store_sql import as_list, insert_event, queue_position, touch
from acp_bridge.conversation.usage import UsageTotals
from acp_bridge.errors import AlreadyRunningError

__all__ = ["QueueWrites"]


class QueueWrites:
    """Changing the queue's messages (reading them is :class:`~.store_reads.QueueReads`')."""

    def __init__(self, connection: StoreConnection, rows: StoredRows) -> None:
        self._connection = connection
        self._rows = rows

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
        """Queue a message (committed on return) and return it.

        ``next=True`` puts it ahead of every queued message; ``unpause=True`` also clears the
        conversation's paused flag in the same transaction (a new send after a stop resumes).
        ``steering=True`` stores it ``steering`` instead of ``queued``: committed before the
        agent's steering method is called with it (see :meth:`steer_refused`). ``behind``
        (with ``next=True``): the queued steers it goes behind, kept first, in that order.
        """
        body = dumps(as_list(content))
        state = MessageState.STEERING if steering else MessageState.QUEUED
        with self._connection.transaction(f"add a message to {conversation_id!r}") as db:
            self._rows.require(db, conversation_id)
            seq: int = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()[0]
            if next:
                position = _head_behind(db, conversation_id, behind)
            else:
                position = queue_position(db, conversation_id, next=False)
            db.execute(
                "INSERT INTO messages (conversation_id, seq, position, content, state, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, seq, position, body, state.value, now),
            )
            touch(db, conversation_id, now, unpause=unpause)
        # As the row now reads (the content through JSON, as a read gives it), without reading
        # it back.
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
        with self._connection.transaction(f"start message {seq} of {conversation_id!r}") as db:
            if self._rows.state(db, conversation_id, seq) != MessageState.QUEUED:
                return False
            running = db.execute(
                "SELECT seq FROM messages WHERE conversation_id = ? AND state = 'running'",
                (conversation_id,),
            ).fetchone()
            if running is not None:
                raise AlreadyRunningError(self._connection.path, conversation_id, running[0])
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
        steered_into: int | None = None,
    ) -> bool:
        """Move a queued, running or steering message to its final ``state``, once.

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
        with self._connection.transaction(f"finish message {seq} of {conversation_id!r}") as db:
            for kind, data, entry_seq in log:
                insert_event(db, conversation_id, (kind, data), entry_seq, now)
            key = (conversation_id, seq)
            if turn is None:
                cursor = db.execute(
                    "UPDATE messages SET state = ?, stop_reason = ?, error = ?, recoverable = ?,"
                    " finished_at = ?, steered_into = ? WHERE conversation_id = ? AND seq = ?"
                    " AND state IN ('queued', 'running', 'steering')",
                    (*outcome, flag, now, steered_into, *key),
                )
            else:  # its reply with it, in the same statement
                cursor = db.execute(
                    "UPDATE messages SET state = ?, stop_reason = ?, error = ?, recoverable = ?,"
                    " finished_at = ?, reply = ?, reply_truncated = ?"
                    " WHERE conversation_id = ? AND seq = ?"
                    " AND state IN ('queued', 'running', 'steering')",
                    (*outcome, flag, now, turn.reply, int(turn.reply_truncated), *key),
                )
            if cursor.rowcount == 0:
                self._rows.state(db, conversation_id, seq)  # raises if there is no such message
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
        with self._connection.transaction(f"requeue message {seq} of {conversation_id!r}") as db:
            if self._rows.state(db, conversation_id, seq) not in RETRYABLE_STATES:
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

    def steer_refused(
        self,
        conversation_id: str,
        seq: int,
        *,
        behind: Sequence[int] = (),
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool:
        """A ``steering`` message the agent did not take: ``queued`` ahead of every queued
        message but the steers ``behind`` (kept first, in that order), a normal message from
        now on (``event`` logged with it). The paused flag is left as it is: a stop since the
        steer was sent holds. False (and nothing changes) when it is not ``steering``."""
        with self._connection.transaction(f"requeue steer {seq} of {conversation_id!r}") as db:
            if self._rows.state(db, conversation_id, seq) != MessageState.STEERING:
                return False
            db.execute(
                "UPDATE messages SET state = 'queued', position = ?"
                " WHERE conversation_id = ? AND seq = ?",
                (_head_behind(db, conversation_id, behind), conversation_id, seq),
            )
            touch(db, conversation_id, now)
            if event is not None:
                insert_event(db, conversation_id, event, seq, now)
            return True

    def recover_after_crash(self, conversation_id: str, *, now: float) -> list[int]:
        """Fail (recoverable) every message left running by a dead bridge; return their seqs.

        Call it once, from the process that takes over the conversation, before prompting.
        Idempotent: a second call finds nothing running and returns ``[]``.
        """
        error = dumps({**BRIDGE_STOPPED_ERROR, "details": {}})
        with self._connection.transaction(f"recover {conversation_id!r} after a crash") as db:
            self._rows.require(db, conversation_id)
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
            spent = self._rows.decode(
                lambda r: UsageTotals.from_json(loads(r[0], dict)), row.fetchone()
            )
            db.execute(
                "UPDATE messages SET usage = ? WHERE conversation_id = ? AND seq = ?",
                (dumps(spent.plus(turn.usage).to_json()), *key),
            )
        elif not turn.meter_changed:
            return
        row = db.execute("SELECT usage FROM conversations WHERE id = ?", (conversation_id,))
        total = self._rows.decode(
            lambda r: UsageTotals.from_json(loads(r[0], dict)), row.fetchone()
        )
        totals = {**total.plus(turn.usage).to_json(), "meter": turn.meter.to_json()}
        db.execute(
            "UPDATE conversations SET usage = ? WHERE id = ?", (dumps(totals), conversation_id)
        )


def _head_behind(db: sqlite3.Connection, conversation_id: str, behind: Sequence[int]) -> int:
    """The position of a message joining the queue's head behind the queued ``behind`` (which
    move to the head first, in that order): every one below every other queued position, so no
    two queued messages ever share one."""
    lowest = queue_position(db, conversation_id, next=True) + 1  # the head's, or past the tail
    first = lowest - len(behind) - 1
    for offset, seq in enumerate(behind):
        db.execute(
            "UPDATE messages SET position = ? WHERE conversation_id = ? AND seq = ?"
            " AND state = 'queued'",
            (first + offset, conversation_id, seq),
        )
    return first + len(behind)
