"""The PostgreSQL store's shared statements: the fenced start of an owner's transaction, touching
a conversation, appending an event (and waking whoever follows the log), where a message joins
the queue, and decoding rows with the SQLite store's record decoders.

Each runs inside a transaction the caller holds (a :class:`~.connection.PgConnection`
transaction's cursor). See :mod:`.lease` for the fence and :mod:`.notify` for the channels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from acp_bridge.conversation.records import dumps
from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import Cursor
from acp_bridge.pgstore.lease import FENCE, Lease, LeaseLostError, fenced, holds, lock_conversation
from acp_bridge.pgstore.notify import EVENTS_CHANNEL

__all__ = ["begin_fenced", "decode", "head_behind", "insert_event", "queue_position", "touch"]

_T = TypeVar("_T")


def begin_fenced(cur: Cursor, name: str, lease: Lease) -> None:
    """The first step of every owner transaction: lock the conversation's row, then check the
    lease (so an old owner is told at once; the fence in each statement is what guarantees
    it).

    Raises:
        UnknownConversationError: no such conversation.
        LeaseLostError: the lease is no longer current.
    """
    lock_conversation(cur, name, lease.conversation_id)
    if not holds(cur, lease):
        raise LeaseLostError(name, lease)


def decode(name: str, decoder: Callable[[Any], _T], row: Any) -> _T:
    """``decoder(row)`` with a row read here (a dict: the SQLite store's decoders read columns
    by name); a row it cannot read raises QueueStoreError (a corrupt record)."""
    try:
        return decoder(cast(Any, row))
    except (ValueError, TypeError, KeyError) as exc:
        raise QueueStoreError(f"{name}: corrupt record {row!r:.200}: {exc}") from exc


def touch(cur: Cursor, name: str, lease: Lease, now: float) -> None:
    """The conversation was updated at ``now`` (never backwards), under the fence."""
    fenced(
        cur,
        name,
        lease,
        "UPDATE conversations SET updated_at = GREATEST(updated_at, %(now)s)"
        f" WHERE id = %(cid)s AND {FENCE}",
        {"now": now, "cid": lease.conversation_id},
    )


def insert_event(
    cur: Cursor, name: str, lease: Lease, event: tuple[str, Any], seq: int | None, now: float
) -> int:
    """Append an event under the fence; return its id. Those who follow the conversation's log
    on other hosts are woken when the transaction commits."""
    kind, data = event
    fenced(
        cur,
        name,
        lease,
        "INSERT INTO events (conversation_id, ts, seq, kind, data)"
        f" SELECT %(cid)s, %(now)s, %(seq)s, %(kind)s, %(data)s WHERE {FENCE} RETURNING id",
        {"cid": lease.conversation_id, "now": now, "seq": seq, "kind": kind, "data": dumps(data)},
    )
    row = cur.fetchone()
    assert row is not None  # fenced() raised if nothing was inserted
    event_id = int(row["id"])
    cur.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, lease.conversation_id))
    return event_id


def queue_position(cur: Cursor, conversation_id: str, *, next: bool) -> int:
    """Where a message joins the queue: after every message, or ahead of every queued one (as
    the SQLite store decides it). The caller holds the conversation's row lock."""
    if next:
        cur.execute(
            "SELECT MIN(position) AS head FROM messages"
            " WHERE conversation_id = %s AND state = 'queued'",
            (conversation_id,),
        )
        row = cur.fetchone()
        if row is not None and row["head"] is not None:
            return int(row["head"]) - 1
    cur.execute(
        "SELECT COALESCE(MAX(position), 0) AS tail FROM messages WHERE conversation_id = %s",
        (conversation_id,),
    )
    row = cur.fetchone()
    assert row is not None
    return int(row["tail"]) + 1


def head_behind(cur: Cursor, conversation_id: str, behind: Sequence[int]) -> int:
    """The position of a message joining the queue's head behind the queued ``behind`` (moved
    to the head first, in that order), as the SQLite store decides it. The caller holds the
    conversation's row lock (and, for an owner write, has checked its fence)."""
    lowest = queue_position(cur, conversation_id, next=True) + 1  # the head's, or past the tail
    first = lowest - len(behind) - 1
    for offset, seq in enumerate(behind):
        cur.execute(
            "UPDATE messages SET position = %s WHERE conversation_id = %s AND seq = %s"
            " AND state = 'queued'",
            (first + offset, conversation_id, seq),
        )
    return first + len(behind)
