"""Cancel and stop through the database: a request a verb on any host writes for the owner of
a conversation, and the owner's answer, both durable (issue 23).

A verb that cannot reach a conversation's owner (it runs on another host) writes a row into
``control`` (:func:`ask`): what it asks (``cancel`` or ``stop``) and, for a cancel, the message
the store shows running (only that one is cancelled: a request acted on late never cancels a
later turn). The same transaction notifies :data:`~.notify.CONTROL_CHANNEL`, so the owner's
listener is woken when, and only if, the request is committed.

The owner acts on every pending request of the conversations it holds (:class:`ControlDesk`)
at each notification, and again whenever its listener (re)connects: a notification sent while
the listener was away is lost, the row is not. It writes its answer into the row
(:func:`answer`: the seq it cancelled or none, and for a stop how many messages stay queued),
once, and notifies :data:`~.notify.CONTROL_ANSWER_CHANNEL`. The verb, listening there before it
asked, reads the answer (:func:`outcome`) at each such notification, bounded, and otherwise
says the request is stored.

Rows older than :data:`CONTROL_KEEP_S` are deleted by the next request (answered or not: a
request nobody acted on for that long is void, and is not acted on any more).

The answer has the shape of the host's ``_acp_bridge/cancel`` and ``_acp_bridge/stop`` results
(``{"cancelled", "seq"?, "queued"?}``), so a verb reports it the same whichever way it came.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, Protocol

import anyio

from acp_bridge.errors import BridgeError, QueueStoreError, UnknownConversationError
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.notify import CONTROL_ANSWER_CHANNEL, CONTROL_CHANNEL
from acp_bridge.record import record

__all__ = [
    "CONTROL_KEEP_S",
    "ControlDesk",
    "ControlKind",
    "ControlRequest",
    "ControlStore",
    "answer",
    "ask",
    "outcome",
    "pending",
]

log = logging.getLogger(__name__)

ControlKind = Literal["cancel", "stop"]

CONTROL_KEEP_S: Final = 3600.0
"""How long a request is kept (and, unanswered, acted on): an hour."""


@record
class ControlRequest:
    """Request ``id``: ``kind`` asked of the owner of ``conversation_id``; for a cancel,
    ``seq`` is the message that ran when it was asked (None: nothing ran)."""

    id: int
    conversation_id: str
    kind: ControlKind
    seq: int | None


def ask(
    conn: PgConnection, conversation_id: str, kind: ControlKind, *, asked_by: str = ""
) -> ControlRequest:
    """Store a request for the owner of the conversation and wake it (one transaction,
    committed on return); old rows are pruned first.

    Raises:
        UnknownConversationError: no such conversation.
        QueueStoreError: the server failed.
    """
    with conn.transaction(f"ask the owner of {conversation_id!r} to {kind}") as cur:
        cur.execute(
            "DELETE FROM control WHERE asked_at < now() - make_interval(secs => %s)",
            (CONTROL_KEEP_S,),
        )
        cur.execute("SELECT 1 FROM conversations WHERE id = %s", (conversation_id,))
        if cur.fetchone() is None:
            raise UnknownConversationError(conn.name, conversation_id)
        cur.execute(
            "INSERT INTO control (conversation_id, kind, seq, asked_by)"
            " SELECT %(cid)s, %(kind)s, (SELECT seq FROM messages WHERE conversation_id = %(cid)s"
            " AND state = 'running'), %(by)s RETURNING id, seq",
            {"cid": conversation_id, "kind": kind, "by": asked_by},
        )
        row = cur.fetchone()
        assert row is not None
        cur.execute("SELECT pg_notify(%s, %s)", (CONTROL_CHANNEL, conversation_id))
    seq = row["seq"]
    return ControlRequest(int(row["id"]), conversation_id, kind, None if seq is None else int(seq))


def pending(conn: PgConnection, conversation_id: str | None = None) -> list[ControlRequest]:
    """The requests not yet answered (of one conversation, or of all), oldest first; those
    older than :data:`CONTROL_KEEP_S` are void and left out."""
    with conn.transaction("read the pending control requests") as cur:
        cur.execute(
            "SELECT id, conversation_id, kind, seq FROM control WHERE answered_at IS NULL"
            " AND (%(cid)s::text IS NULL OR conversation_id = %(cid)s)"
            " AND asked_at >= now() - make_interval(secs => %(keep)s) ORDER BY id",
            {"cid": conversation_id, "keep": CONTROL_KEEP_S},
        )
        rows = cur.fetchall()
    return [
        ControlRequest(
            int(row["id"]),
            str(row["conversation_id"]),
            "stop" if row["kind"] == "stop" else "cancel",
            None if row["seq"] is None else int(row["seq"]),
        )
        for row in rows
    ]


def answer(conn: PgConnection, request_id: int, result: dict[str, Any]) -> bool:
    """Write the owner's answer to request ``request_id``, once; False when it was answered
    already (or pruned)."""
    with conn.transaction("answer a control request") as cur:
        cur.execute(
            "UPDATE control SET answered_at = now(), outcome = %s"
            " WHERE id = %s AND answered_at IS NULL",
            (json.dumps(result, separators=(",", ":")), request_id),
        )
        if cur.rowcount == 0:
            return False
        cur.execute(
            "SELECT pg_notify(%s, conversation_id) FROM control WHERE id = %s",
            (CONTROL_ANSWER_CHANNEL, request_id),
        )
        return True


def outcome(conn: PgConnection, request_id: int) -> dict[str, Any] | None:
    """The owner's answer to request ``request_id``, or None while there is none."""
    with conn.transaction("read a control request's answer") as cur:
        cur.execute("SELECT outcome FROM control WHERE id = %s", (request_id,))
        row = cur.fetchone()
    if row is None or row["outcome"] is None:
        return None
    try:
        found = json.loads(row["outcome"])
    except ValueError as exc:
        raise QueueStoreError(f"{conn.name}: corrupt control answer {row!r:.200}") from exc
    return found if isinstance(found, dict) else None


Act = Callable[[ControlRequest], Awaitable[dict[str, Any] | None]]
"""The owner acting on a request: its answer, or None when it does not hold that conversation
(the request is left for its owner)."""


class ControlStore(Protocol):
    """What :class:`ControlDesk` needs of the store (:class:`~.store.PgStore` has it)."""

    def pending_controls(self, conversation_id: str | None = None) -> list[ControlRequest]: ...

    def answer_control(self, request_id: int, result: dict[str, Any]) -> bool: ...


class ControlDesk:
    """An owner's side of the control requests: :meth:`sweep` acts on the pending ones (by
    ``act``) and writes each answer. Sweeps take turns, so a notification and a reconnect
    arriving together never act on one request twice."""

    def __init__(self, store: ControlStore, act: Act) -> None:
        self._store = store
        self._act = act
        self._lock = anyio.Lock()

    async def sweep(self, conversation_id: str | None = None) -> None:
        """Act on the pending requests (of ``conversation_id``, or of every conversation). An
        owner that fails to act answers the error (``{"cancelled": false, "error"}``); a store
        that cannot be read or written is logged (the rows stay pending for the next sweep)."""
        async with self._lock:
            try:
                requests = await anyio.to_thread.run_sync(
                    self._store.pending_controls, conversation_id
                )
                for request in requests:
                    try:
                        result = await self._act(request)
                    except BridgeError as exc:
                        result = {"cancelled": False, "error": str(exc)}
                    if result is None:
                        continue  # not ours: left for the conversation's owner
                    await anyio.to_thread.run_sync(self._store.answer_control, request.id, result)
                    log.info(
                        "%s: %s asked through the store: %s",
                        request.conversation_id,
                        request.kind,
                        result,
                    )
            except QueueStoreError as exc:
                log.warning("control requests not read or answered: %s", exc)
