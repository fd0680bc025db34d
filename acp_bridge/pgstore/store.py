"""The PostgreSQL store behind the conversation layer's one interface
(:class:`~acp_bridge.conversation.store_api.Store`): the SQLite store's signatures, with the
lease bound in.

:class:`PgStore` holds two sessions of one host (one ``owner_tag``): the **lease session**,
which holds the advisory locks of the conversations this host owns (and heartbeats them, see
:meth:`PgStore.keeper`), and the **data session**, on which every read and write runs, one
transaction at a time (a batch is one transaction). Keeping them apart lets a lease be taken
inside a batch, and keeps a slow query from delaying a heartbeat.

Ownership. Creating a conversation, adding a message (any host may queue into any
conversation; the owner is woken by LISTEN/NOTIFY) and every read need no lease. Every other
write is an owner write: it carries the fence of this host's lease of the conversation. The
lease is taken on the first owner write to a conversation (or by :meth:`PgStore.own` first),
so a caller written for SQLite needs no change; when another live host owns the conversation,
:class:`ConversationOwnedError` is raised and nothing is written. A lease that was lost (taken
over after this host looked dead, reported by the keeper or by a fenced write) stays lost: its
conversation's owner writes raise :class:`~.lease.LeaseLostError` until :meth:`PgStore.own`
is asked again, so an old owner never silently becomes the owner again in the middle of a
turn. :meth:`PgStore.disown` releases a lease (a conversation closed by its host);
:meth:`PgStore.close` releases them all, by ending the lease session.

Group commits. :meth:`PgStore.batch` makes every call of the thread one transaction (one round
trip to commit). :meth:`PgStore.commit_now_if_free` always declines: a commit across a
connection waits for the server, so it never runs on an event loop's thread; the caller takes
the slow way (a batch in a worker thread), as with a SQLite store that fsyncs every commit.

Connection loss. A data session lost under a call (the server ended it, the network) is
opened again and the call run again, within :data:`~.retry.RECONNECT_BOUND_S`
(:mod:`.retry`): a turn goes on. A lost lease session loses every lease held on it (the
server released their locks); :meth:`PgStore.own` and the keeper open it again.

Catalog order. "Most recently updated first, ties: the one created last" uses the
conversations' ``lock_key`` (an identity: creation order) for the ties, as SQLite uses its
rowid.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial, wraps
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, Unpack

import anyio
import anyio.from_thread
import anyio.lowlevel

from acp_bridge.conversation.queue_states import MessageRecord, MessageState
from acp_bridge.conversation.records import (
    ConversationRecord,
    ConversationSummary,
    EventRecord,
    FinishedTurn,
    StoredMessage,
    conversation_from_row,
    dumps,
)
from acp_bridge.conversation.store_api import ConversationOwnedError
from acp_bridge.conversation.store_catalog import ConversationChanges, LogEntry
from acp_bridge.errors import UnknownConversationError
from acp_bridge.pgstore import control
from acp_bridge.pgstore.connection import ConnectionLostError, PgConnection
from acp_bridge.pgstore.control import ControlKind, ControlRequest
from acp_bridge.pgstore.conversations import PgConversations
from acp_bridge.pgstore.keeper import LeaseKeeper
from acp_bridge.pgstore.lease import (
    STALE_ENV,
    Lease,
    LeaseLostError,
    LeaseRow,
    LeaseTiming,
    acquire,
    lease_row,
    lease_timing,
    lock_holder,
    release,
)
from acp_bridge.pgstore.queue import PgQueue
from acp_bridge.pgstore.retry import RECONNECT_BOUND_S, reopen, retrying
from acp_bridge.pgstore.schema import migrate
from acp_bridge.pgstore.sql import begin_fenced, decode

__all__ = ["ConversationOwnedError", "PgStore", "host_tag"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _retried(
    method: Callable[Concatenate[PgStore, _P], _T],
) -> Callable[Concatenate[PgStore, _P], _T]:
    """A data-session call of the store, run again on a new session when the session is lost
    under it (:func:`~.retry.retrying`)."""

    @wraps(method)
    def call(self: PgStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return retrying(self._data, partial(method, self, *args, **kwargs))

    return call


def host_tag() -> str:
    """A tag for this process, unique among hosts: host name, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class PgStore:
    """A PostgreSQL store seen through the SQLite store's interface (see the module's text)."""

    def __init__(
        self, data: PgConnection, leases: PgConnection, timing: LeaseTiming | None = None
    ) -> None:
        """Use :meth:`open`. ``data`` and ``leases`` are two sessions of one host (one
        owner tag); ``timing``: the stale limit and heartbeat interval (the defaults if None)."""
        self._timing = LeaseTiming() if timing is None else timing
        self._data = data
        self._lease_conn = leases
        self._queue = PgQueue(data)
        self._conversations = PgConversations(data)
        self._name = data.name
        self._held: dict[str, Lease] = {}
        self._lost: dict[str, Lease] = {}
        self._leases_lock = threading.Lock()
        self._lost_listeners: list[Callable[[Lease], None]] = []
        self._keeper = LeaseKeeper(leases, self.lost, interval_s=self._timing.heartbeat_interval_s)

    @classmethod
    def open(
        cls, url: str, *, owner_tag: str | None = None, migrate_schema: bool = True
    ) -> PgStore:
        """Connect to ``url`` (two sessions) and, unless told not to, bring its schema up to
        date (at the current version that changes nothing and needs no DDL privilege).

        ``owner_tag`` names this host in the lease table and in ``application_name``: one per
        process, unique among hosts (:func:`host_tag` by default). The stale limit and the
        heartbeat interval are ``$ACP_BRIDGE_LEASE_STALE_S``'s (:func:`~.lease.lease_timing`).

        Raises:
            QueueStoreError: the server cannot be reached, or refused us, or the schema is
                newer than this acp-bridge (the message names the URL without its password),
                or ``$ACP_BRIDGE_LEASE_STALE_S`` is not a valid limit.
        """
        timing = lease_timing(os.environ.get(STALE_ENV))
        tag = host_tag() if owner_tag is None else owner_tag
        data = PgConnection.open(url, owner_tag=tag)
        try:
            if migrate_schema:
                migrate(data)
            leases = PgConnection.open(url, owner_tag=tag)
        except BaseException:
            data.close()
            raise
        return cls(data, leases, timing)

    # -- the connection --------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The store's URL, without its password."""
        return self._name

    @property
    def is_shared(self) -> bool:
        return True

    @property
    def url(self) -> str:
        """The URL to open another session with (it may hold a password: never show it)."""
        return self._data.url

    @property
    def owner_tag(self) -> str:
        return self._data.owner_tag

    def close(self) -> None:
        """Close both sessions: the server releases every lease this store held. Idempotent."""
        with self._leases_lock:
            self._held.clear()
        self._lease_conn.close()
        self._data.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name} [{self.owner_tag}]>"

    @contextmanager
    def batch(self, what: str = "commit a batch of changes") -> Iterator[None]:
        """Every call of this thread inside the block is one transaction, one commit, all or
        nothing."""
        with self._data.batch(what):
            yield

    def commit_now_if_free(self, work: Callable[[], bool]) -> bool:
        """Always False: a commit across a connection waits (see the module's text)."""
        return False

    # -- ownership -------------------------------------------------------------------------------

    def own(self, conversation_id: str) -> Lease:
        """Take (or keep) this host's lease of the conversation, taking over from an owner
        whose heartbeat is stale; forgets an earlier loss. A lease session found lost loses
        every lease held on it and is opened again (within the reconnect bound).

        Raises:
            ConversationOwnedError: another live host owns it.
            UnknownConversationError: no such conversation.
            QueueStoreError: the server cannot be reached.
        """
        try:
            return self._own(conversation_id)
        except ConnectionLostError as exc:
            self._lease_session_lost(exc)
        return self._own(conversation_id)

    def _lease_session_lost(self, exc: ConnectionLostError) -> None:
        """The lease session is gone, and every advisory lock with it: each lease held is
        lost (reported); the session is opened again."""
        for lease in self.leases:
            self.lost(lease)
        reopen(self._lease_conn, exc, deadline=time.monotonic() + RECONNECT_BOUND_S)

    def _own(self, conversation_id: str) -> Lease:
        with self._leases_lock:
            held = self._held.get(conversation_id)
            if held is not None:
                return held
            lease = acquire(
                self._lease_conn, conversation_id, stale_after_s=self._timing.stale_after_s
            )
            if lease is None:
                raise ConversationOwnedError(self._name, conversation_id)
            self._lost.pop(conversation_id, None)
            self._held[conversation_id] = lease
            self._keeper.hold(lease)
            return lease

    def disown(self, conversation_id: str) -> None:
        """Release this host's lease of the conversation, if it holds one (quietly if lost)."""
        with self._leases_lock:
            lease = self._held.pop(conversation_id, None)
            self._lost.pop(conversation_id, None)
            self._keeper.forget(conversation_id)
        if lease is not None:
            release(self._lease_conn, lease)

    def owns(self, conversation_id: str) -> bool:
        """True while this host holds the conversation's lease (as far as it knows)."""
        with self._leases_lock:
            return conversation_id in self._held

    def lost(self, lease: Lease) -> None:
        """The lease was lost (the keeper or a fenced write found out): the conversation's
        owner writes raise LeaseLostError from now on, until :meth:`own` is asked again."""
        with self._leases_lock:
            if self._held.get(lease.conversation_id) != lease:
                return
            del self._held[lease.conversation_id]
            self._lost[lease.conversation_id] = lease
            self._keeper.forget(lease.conversation_id)
            listeners = list(self._lost_listeners)
        for listener in listeners:
            listener(lease)

    def on_lost(self, listener: Callable[[Lease], None]) -> None:
        """Call ``listener`` with each lease this store loses (from the thread that found out:
        the keeper's event loop, or a worker thread whose write was fenced)."""
        with self._leases_lock:
            self._lost_listeners.append(listener)

    def report_lost_here(self, listener: Callable[[Lease], None]) -> None:
        """Call ``listener`` with each lease this store loses, on the thread of the event loop
        this is called from, whichever thread found out (the keeper, or a worker thread whose
        write was fenced). Call it from that event loop."""
        token = anyio.lowlevel.current_token()
        loop_thread = threading.get_ident()

        def report(lease: Lease) -> None:
            if threading.get_ident() == loop_thread:
                listener(lease)
                return
            with contextlib.suppress(RuntimeError):  # the event loop has ended
                anyio.from_thread.run_sync(listener, lease, token=token)

        self.on_lost(report)

    @property
    def keeper(self) -> LeaseKeeper:
        """The heartbeat of this store's leases: run it (``await tg.start(keeper.run)``) for as
        long as the host owns conversations. A lease it finds lost is :meth:`lost`."""
        return self._keeper

    @_retried
    def is_owned(self, conversation_id: str) -> bool:
        """True while some live session (of any host, this one included) holds the
        conversation's lease."""
        return lock_holder(self._data, conversation_id) is not None

    # -- control requests (cancel and stop through the database: .control) ---------------------

    @_retried
    def request_control(self, conversation_id: str, kind: ControlKind) -> ControlRequest:
        """Ask the conversation's owner, on whichever host, to ``cancel`` its running turn or
        to ``stop`` (committed on return; its listener is woken). See :mod:`.control`."""
        return control.ask(self._data, conversation_id, kind, asked_by=self.owner_tag)

    @_retried
    def pending_controls(self, conversation_id: str | None = None) -> list[ControlRequest]:
        """The control requests not answered yet (of one conversation, or of all)."""
        return control.pending(self._data, conversation_id)

    @_retried
    def answer_control(self, request_id: int, result: dict[str, Any]) -> bool:
        """Write the owner's answer to a control request, once."""
        return control.answer(self._data, request_id, result)

    @_retried
    def control_outcome(self, request_id: int) -> dict[str, Any] | None:
        """The owner's answer to a control request, or None while there is none."""
        return control.outcome(self._data, request_id)

    @_retried
    def lease_owner(self, conversation_id: str) -> LeaseRow | None:
        """Who holds (or last held) the conversation's lease, as its row says; None when
        nobody ever took it."""
        return lease_row(self._data, conversation_id)

    @property
    def leases(self) -> list[Lease]:
        with self._leases_lock:
            return list(self._held.values())

    def _lease(self, conversation_id: str) -> Lease:
        with self._leases_lock:
            lost = self._lost.get(conversation_id)
            held = self._held.get(conversation_id)
        if lost is not None:
            raise LeaseLostError(self._name, lost)
        return held if held is not None else self.own(conversation_id)

    @contextmanager
    def _fenced(self, conversation_id: str) -> Iterator[Lease]:
        """The lease for one owner write; a LeaseLostError from the write marks it lost."""
        lease = self._lease(conversation_id)
        try:
            yield lease
        except LeaseLostError:
            self.lost(lease)
            raise

    # -- conversations and event logs ------------------------------------------------------------

    @_retried
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
        return self._conversations.create_conversation(
            conversation_id,
            agent=agent,
            cwd=cwd,
            mcp_servers=mcp_servers,
            additional_directories=additional_directories,
            config=config,
            title=title,
            now=now,
        )

    @_retried
    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        return self._conversations.get_conversation(conversation_id)

    @_retried
    def latest_conversation(self) -> ConversationRecord | None:
        found = self._list("LIMIT 1")
        return found[0] if found else None

    @_retried
    def latest_resumable(
        self, cwd: str | None, argv: Sequence[str] | None = None
    ) -> ConversationRecord | None:
        with self._data.transaction("find a conversation to resume") as cur:
            cur.execute(
                "SELECT * FROM conversations WHERE (%(cwd)s::text IS NULL OR cwd = %(cwd)s)"
                " AND session_id IS NOT NULL ORDER BY updated_at DESC, lock_key DESC",
                {"cwd": cwd},
            )
            for row in cur:
                record = decode(self._name, conversation_from_row, row)
                if argv is None or list(record.agent.get("argv") or []) == list(argv):
                    return record
            return None

    @_retried
    def list_conversations(self) -> list[ConversationRecord]:
        return self._list("")

    @_retried
    def conversation_summaries(self) -> list[ConversationSummary]:
        with self._data.transaction("list conversations") as cur:
            cur.execute(
                "SELECT conversation_id, state, COUNT(*) AS n FROM messages"
                " GROUP BY conversation_id, state"
            )
            counts: dict[str, dict[str, int]] = {}
            for row in cur.fetchall():
                counts.setdefault(row["conversation_id"], {})[row["state"]] = int(row["n"])
            cur.execute("SELECT * FROM conversations ORDER BY updated_at DESC, lock_key DESC")
            records = [decode(self._name, conversation_from_row, row) for row in cur.fetchall()]
        return [ConversationSummary(record, counts.get(record.id, {})) for record in records]

    @_retried
    def find_conversations(self, prefix: str) -> list[str]:
        with self._data.transaction("find a conversation") as cur:
            cur.execute("SELECT id FROM conversations WHERE id = %s", (prefix,))
            if cur.fetchone() is not None:
                return [prefix]
            cur.execute(
                "SELECT id FROM conversations WHERE left(id, %s) = %s ORDER BY id LIMIT 10",
                (len(prefix), prefix),
            )
            return [str(row["id"]) for row in cur.fetchall()]

    @_retried
    def delete_conversation(self, conversation_id: str) -> bool:
        """Delete a conversation with its messages and events (its owner row with it); False
        when there was none. Takes the lease first, so a conversation a live host owns is
        refused (ConversationOwnedError), never deleted under it."""
        try:
            lease = self._lease(conversation_id)
        except UnknownConversationError:
            return False
        try:
            with self._data.transaction(f"delete conversation {conversation_id!r}") as cur:
                begin_fenced(cur, self._name, lease)
                cur.execute("DELETE FROM conversations WHERE id = %s", (conversation_id,))
                return cur.rowcount > 0
        finally:
            self.disown(conversation_id)

    @_retried
    def update_conversation(
        self, conversation_id: str, *, now: float, **changes: Unpack[ConversationChanges]
    ) -> ConversationRecord:
        with self._fenced(conversation_id) as lease:
            return self._conversations.update_conversation(lease, now=now, **changes)

    @_retried
    def add_event(
        self, conversation_id: str, kind: str, data: Any, *, seq: int | None = None, now: float
    ) -> int:
        with self._fenced(conversation_id) as lease:
            return self._conversations.add_event(lease, kind, data, seq=seq, now=now)

    @_retried
    def add_events(
        self, conversation_id: str, entries: Sequence[LogEntry], *, now: float
    ) -> list[int]:
        with self._fenced(conversation_id) as lease:
            return self._conversations.add_events(lease, entries, now=now)

    @_retried
    def events(
        self, conversation_id: str, after_id: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        return self._conversations.events(conversation_id, after_id, limit)

    @_retried
    def last_event_id(self, conversation_id: str) -> int:
        with self._data.transaction("read the last event") as cur:
            cur.execute(
                "SELECT COALESCE(MAX(id), 0) AS last FROM events WHERE conversation_id = %s",
                (conversation_id,),
            )
            row = cur.fetchone()
            return 0 if row is None else int(row["last"])

    # -- the queue -------------------------------------------------------------------------------

    @_retried
    def next_queued(self, conversation_id: str) -> StoredMessage | None:
        return self._queue.next_queued(conversation_id)

    @_retried
    def queued(self, conversation_id: str) -> list[StoredMessage]:
        return self._queue.queued(conversation_id)

    @_retried
    def messages(
        self, conversation_id: str, states: Iterable[MessageState | str] | None = None
    ) -> list[StoredMessage]:
        return self._queue.messages(conversation_id, states)

    @_retried
    def queue_state(self, conversation_id: str) -> tuple[list[MessageRecord], dict[int, list[Any]]]:
        return self._queue.queue_state(conversation_id)

    @_retried
    def get_message(self, conversation_id: str, seq: int) -> StoredMessage | None:
        return self._queue.get_message(conversation_id, seq)

    @_retried
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
        """Queue a message (no lease needed: any host may), committed on return; the owner
        is woken by a notification sent in the same transaction."""
        return self._queue.add_message(
            conversation_id,
            content,
            next=next,
            unpause=unpause,
            steering=steering,
            behind=behind,
            now=now,
        )

    @_retried
    def mark_running(
        self,
        conversation_id: str,
        seq: int,
        *,
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool:
        with self._fenced(conversation_id) as lease:
            return self._queue.mark_running(lease, seq, now=now, event=event)

    @_retried
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
        MessageState(state)  # a bad state is a ValueError before any lease is taken
        with self._fenced(conversation_id) as lease:
            return self._queue.finish(
                lease,
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

    @_retried
    def requeue(
        self, conversation_id: str, seq: int, *, next: bool, now: float, unpause: bool = False
    ) -> bool:
        with self._fenced(conversation_id) as lease:
            return self._queue.requeue(lease, seq, next=next, now=now, unpause=unpause)

    @_retried
    def steer_refused(
        self,
        conversation_id: str,
        seq: int,
        *,
        behind: Sequence[int] = (),
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool:
        with self._fenced(conversation_id) as lease:
            return self._queue.steer_refused(lease, seq, behind=behind, now=now, event=event)

    @_retried
    def recover_after_crash(self, conversation_id: str, *, now: float) -> list[int]:
        with self._fenced(conversation_id) as lease:
            return self._queue.recover_after_crash(lease, now=now)

    # -- copying -------------------------------------------------------------------------------

    @_retried
    def import_conversation(
        self,
        record: ConversationRecord,
        messages: Sequence[StoredMessage],
        events: Sequence[EventRecord],
    ) -> bool:
        """Store a conversation copied from another store as it was, in one transaction
        (no lease: nobody can own a conversation that is not here yet); False when one with
        its id is here already."""
        usage = dumps({**record.usage.to_json(), "meter": record.cost_meter.to_json()})
        with self._data.transaction(f"copy conversation {record.id!r}") as cur:
            cur.execute(
                "INSERT INTO conversations (id, created_at, updated_at, agent, cwd, session_id,"
                " mcp_servers, additional_directories, config, paused, title, usage)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (
                    record.id, record.created_at, record.updated_at, dumps(record.agent),
                    record.cwd, record.session_id, dumps(record.mcp_servers),
                    dumps(record.additional_directories), dumps(record.config), record.paused,
                    record.title, usage,
                ),
            )  # fmt: skip
            if cur.rowcount == 0:
                return False
            cur.executemany(
                "INSERT INTO messages (conversation_id, seq, position, content, state,"
                " stop_reason, error, recoverable, attempts, created_at, started_at,"
                " finished_at, reply, reply_truncated, usage, steered_into)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        record.id, m.seq, m.position, dumps(m.content), m.state.value,
                        m.stop_reason, None if m.error is None else dumps(m.error),
                        m.recoverable, m.attempts, m.created_at, m.started_at, m.finished_at,
                        m.reply, m.reply_truncated, dumps(m.usage.to_json()), m.steered_into,
                    )
                    for m in messages
                ],
            )  # fmt: skip
            cur.executemany(
                "INSERT INTO events (conversation_id, ts, seq, kind, data)"
                " VALUES (%s, %s, %s, %s, %s)",
                [(record.id, e.ts, e.seq, e.kind, dumps(e.data)) for e in events],
            )
            return True

    # -- internals -------------------------------------------------------------------------------

    def _list(self, limit: str) -> list[ConversationRecord]:
        with self._data.transaction("list conversations") as cur:
            cur.execute(
                "SELECT * FROM conversations ORDER BY updated_at DESC, lock_key DESC " + limit
            )
            return [decode(self._name, conversation_from_row, row) for row in cur.fetchall()]
