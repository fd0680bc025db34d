"""Ownership of a conversation across hosts: a lease, and the fence every owner write carries.

The lease has two parts.

1. **An advisory lock on the owner's session** (``pg_try_advisory_lock(lock_key)``, the key is
   the conversation's ``lock_key``). At most one session holds it, and the server releases it
   when that session ends: a host that dies, or whose connection is cut, loses its leases
   without doing anything.
2. **An owner generation, the fencing token** (``conversation_owners.generation``), bumped by
   every acquire. Every write the owner makes carries :data:`FENCE` (``generation = <ours>``)
   in the same statement, so once another host took the conversation, an old owner that comes
   back (a stopped process continued, a partition healed, a reconnect) changes nothing: its
   statement matches no row and :func:`fenced` raises :class:`LeaseLostError`.

Why the fence cannot race the take-over. Every fenced transaction first locks the
conversation's row (``SELECT ... FOR UPDATE``, :func:`lock_conversation`), and an acquire locks
the same row before it bumps the generation. So the generation cannot change between a fenced
statement and its commit: a write either commits before the new owner's bump, or sees the new
generation and changes nothing.

A dead owner, and a stopped one. A crashed host's session ends, and with it the lock. But a
host stopped with SIGSTOP, or cut off by a partition without a reset, keeps its session (and so
its lock) open: PostgreSQL cannot tell a silent session from a slow one. Owners therefore
heartbeat (:func:`heartbeat`, every :data:`HEARTBEAT_INTERVAL_S`, the server's clock on both
sides, so no clock skew between hosts matters). A host asked for a conversation whose lock is
held by an owner whose heartbeat is older than ``stale_after_s`` (default
:data:`STALE_AFTER_S`; a host's limit, and the heartbeat interval that follows it, are
:func:`lease_timing` of ``$ACP_BRIDGE_LEASE_STALE_S``) ends that owner's sessions
(:func:`take_over_stale`: ``pg_terminate_backend`` of every session with the owner's
``application_name``, which includes the lease's session and any write session in a
transaction) and takes the lease. If
the stale owner was only slow, not dead, it has lost its lease all the same, and the fence
stops its next write. Sessions stopped inside a transaction are also ended by the server after
``idle_in_transaction_session_timeout`` (:mod:`.connection`); TCP keepalives notice a peer
that vanished from the network.

Terminating another session needs the same role (or ``pg_signal_backend``): see
``docs/postgres.md``.

A session's advisory locks are re-entrant; :func:`try_acquire` on a session that already holds
the conversation returns None instead of counting the lock twice: the caller keeps one lease
per conversation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from acp_bridge.errors import QueueStoreError, UnknownConversationError
from acp_bridge.pgstore.connection import Cursor, PgConnection
from acp_bridge.record import record

__all__ = [
    "FENCE",
    "HEARTBEATS_PER_STALE",
    "HEARTBEAT_INTERVAL_S",
    "MIN_STALE_AFTER_S",
    "STALE_AFTER_S",
    "STALE_ENV",
    "TERMINATE_WAIT_S",
    "Lease",
    "LeaseLostError",
    "LeaseRow",
    "LeaseTiming",
    "acquire",
    "fenced",
    "heartbeat",
    "holds",
    "lease_row",
    "lease_timing",
    "lock_conversation",
    "lock_holder",
    "release",
    "take_over_stale",
    "try_acquire",
]

HEARTBEAT_INTERVAL_S: Final = 2.0
"""How often an owner refreshes its leases' heartbeat (at most: see :func:`lease_timing`)."""
STALE_AFTER_S: Final = 15.0
"""A lease whose heartbeat is older than this may be taken over (several missed heartbeats);
the default of ``$ACP_BRIDGE_LEASE_STALE_S``."""
STALE_ENV: Final = "ACP_BRIDGE_LEASE_STALE_S"
"""The environment variable that sets a host's stale limit, in seconds (:func:`lease_timing`)."""
HEARTBEATS_PER_STALE: Final = 5
"""The least number of heartbeats an owner makes within the stale limit: a shorter limit
shortens the heartbeat interval with it, so an owner is only ever stale after several missed
heartbeats (the limit is always at least three intervals)."""
MIN_STALE_AFTER_S: Final = 1.0
"""The shortest stale limit accepted (a heartbeat every 0.2 s)."""
TERMINATE_WAIT_S: Final = 5.0
"""How long ``pg_terminate_backend`` waits for a stale owner's session to be gone."""

FENCE: Final = (
    "EXISTS (SELECT 1 FROM conversation_owners fence"
    " WHERE fence.conversation_id = %(fence_cid)s AND fence.generation = %(fence_gen)s)"
)
"""The condition every owner write carries: the lease's generation is still the current one."""


@record
class LeaseTiming:
    """How long a host lets another's heartbeat age before it may take that host's
    conversations over (``stale_after_s``), and how often it refreshes its own leases
    (``heartbeat_interval_s``)."""

    stale_after_s: float = STALE_AFTER_S
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S


def lease_timing(setting: str | None) -> LeaseTiming:
    """The lease timing ``$ACP_BRIDGE_LEASE_STALE_S`` (``setting``, None when unset) asks for:
    the stale limit in seconds (default :data:`STALE_AFTER_S`), and a heartbeat interval of
    :data:`HEARTBEAT_INTERVAL_S`, or a :data:`HEARTBEATS_PER_STALE`-th of the limit when that is
    shorter. A team may shorten the limit (a quicker take-over on a LAN) or lengthen it (a
    flaky link); every host on one database should use the same.

    Raises:
        QueueStoreError: ``setting`` is not a number of seconds, or is below
            :data:`MIN_STALE_AFTER_S` (the message names the variable).
    """
    if setting is None or not setting.strip():
        return LeaseTiming()
    try:
        stale = float(setting)
    except ValueError:
        stale = math.nan
    if not math.isfinite(stale) or stale < MIN_STALE_AFTER_S:
        raise QueueStoreError(
            f"${STALE_ENV} is {setting!r}: it must be a number of seconds, at least "
            f"{MIN_STALE_AFTER_S:g} (how old another host's lease heartbeat may grow before "
            f"this host takes its conversations over; default {STALE_AFTER_S:g})"
        )
    heartbeat_s = min(HEARTBEAT_INTERVAL_S, stale / HEARTBEATS_PER_STALE)
    return LeaseTiming(stale_after_s=stale, heartbeat_interval_s=heartbeat_s)


@record
class Lease:
    """A conversation held by ``owner`` (a host's tag) at ``generation`` (the fencing token),
    through the advisory lock ``lock_key`` on the session that acquired it."""

    conversation_id: str
    generation: int
    owner: str
    lock_key: int


class LeaseLostError(QueueStoreError):
    """The conversation's lease is no longer ours: another owner took it; nothing was written."""

    def __init__(self, name: str, lease: Lease) -> None:
        super().__init__(
            f"{name}: the lease of conversation {lease.conversation_id!r} (generation "
            f"{lease.generation}) is lost: another host owns it now; nothing was written"
        )
        self.lease = lease


def lock_conversation(cur: Cursor, name: str, conversation_id: str) -> None:
    """Lock the conversation's row for this transaction (every write of a conversation and
    every acquire take it first: see the module's text).

    Raises:
        UnknownConversationError: no such conversation.
    """
    cur.execute("SELECT 1 FROM conversations WHERE id = %s FOR UPDATE", (conversation_id,))
    if cur.fetchone() is None:
        raise UnknownConversationError(name, conversation_id)


def fenced(cur: Cursor, name: str, lease: Lease, query: str, params: Mapping[str, Any]) -> int:
    """Run one write statement that carries :data:`FENCE`; return its row count.

    Zero rows means either that nothing matched (a message already final) or that the lease is
    lost; the second raises.

    Raises:
        LeaseLostError: the conversation's generation is no longer ``lease``'s.
    """
    if "%(fence_gen)s" not in query:
        raise ValueError("a fenced statement must carry FENCE")
    fence = {"fence_cid": lease.conversation_id, "fence_gen": lease.generation}
    cur.execute(query.encode(), {**params, **fence})
    count = cur.rowcount
    if count == 0 and not holds(cur, lease):
        raise LeaseLostError(name, lease)
    return count


def holds(cur: Cursor, lease: Lease) -> bool:
    """True while ``lease`` is the conversation's current generation."""
    cur.execute(
        "SELECT 1 FROM conversation_owners WHERE conversation_id = %s AND generation = %s",
        (lease.conversation_id, lease.generation),
    )
    return cur.fetchone() is not None


def try_acquire(conn: PgConnection, conversation_id: str) -> Lease | None:
    """Take the conversation's lease on ``conn``'s session, for its host (``conn.owner_tag``),
    if no live session holds it: the advisory lock, then the generation bumped. None when
    another session (or this one already) holds it.

    Raises:
        ValueError: ``conn`` has no owner tag (a take-over could not find the owner's
            sessions).
        UnknownConversationError: no such conversation.
        QueueStoreError: the server failed.
    """
    owner = conn.owner_tag
    if not owner:
        raise ValueError("a lease is taken on a connection with an owner tag (its host)")
    with conn.session(f"take the lease of {conversation_id!r}") as cur:
        cur.execute("SELECT lock_key FROM conversations WHERE id = %s", (conversation_id,))
        row = cur.fetchone()
        if row is None:
            raise UnknownConversationError(conn.name, conversation_id)
        key = int(row["lock_key"])
        if _holder(cur, key) == conn.backend_pid:
            return None  # re-entrant: never count it twice
        cur.execute("SELECT pg_try_advisory_lock(%s) AS locked", (key,))
        locked = cur.fetchone()
        if locked is None or not locked["locked"]:
            return None
    try:
        with conn.transaction(f"take the lease of {conversation_id!r}") as cur:
            lock_conversation(cur, conn.name, conversation_id)
            cur.execute(
                "INSERT INTO conversation_owners AS o"
                " (conversation_id, generation, owner, backend_pid)"
                " VALUES (%(cid)s, 1, %(owner)s, pg_backend_pid())"
                " ON CONFLICT (conversation_id) DO UPDATE SET generation = o.generation + 1,"
                " owner = excluded.owner, backend_pid = excluded.backend_pid,"
                " acquired_at = now(), heartbeat_at = now()"
                " RETURNING generation",
                {"cid": conversation_id, "owner": owner},
            )
            bumped = cur.fetchone()
            assert bumped is not None
            return Lease(conversation_id, int(bumped["generation"]), owner, key)
    except BaseException:
        _unlock(conn, key)
        raise


def acquire(
    conn: PgConnection, conversation_id: str, *, stale_after_s: float = STALE_AFTER_S
) -> Lease | None:
    """:func:`try_acquire`; when a stale owner holds the conversation, end its sessions
    (:func:`take_over_stale`) and try once more. None when a live owner holds it."""
    lease = try_acquire(conn, conversation_id)
    if lease is None and take_over_stale(conn, conversation_id, stale_after_s=stale_after_s):
        lease = try_acquire(conn, conversation_id)
    return lease


def release(conn: PgConnection, lease: Lease) -> None:
    """Give the lease back (on the session that acquired it): the owner row forgets the
    session, the advisory lock is released. The generation stays; the next acquire bumps it.
    A lease already lost is released quietly."""
    with conn.transaction(f"release the lease of {lease.conversation_id!r}") as cur:
        cur.execute(
            "UPDATE conversation_owners SET backend_pid = NULL"
            " WHERE conversation_id = %s AND generation = %s",
            (lease.conversation_id, lease.generation),
        )
    _unlock(conn, lease.lock_key)


def heartbeat(conn: PgConnection, leases: Sequence[Lease]) -> list[Lease]:
    """Refresh the heartbeat of ``leases`` in one statement; return those that are lost (their
    generation is no longer current: stop their conversations at once)."""
    if not leases:
        return []
    with conn.transaction("refresh the leases' heartbeat") as cur:
        cur.execute(
            "UPDATE conversation_owners o SET heartbeat_at = now()"
            " FROM unnest(%s::text[], %s::bigint[]) AS l(cid, gen)"
            " WHERE o.conversation_id = l.cid AND o.generation = l.gen"
            " RETURNING o.conversation_id",
            ([lease.conversation_id for lease in leases], [lease.generation for lease in leases]),
        )
        kept = {row["conversation_id"] for row in cur.fetchall()}
    return [lease for lease in leases if lease.conversation_id not in kept]


def take_over_stale(
    conn: PgConnection, conversation_id: str, *, stale_after_s: float = STALE_AFTER_S
) -> bool:
    """End the sessions of the conversation's owner if its heartbeat is older than
    ``stale_after_s`` (see the module's text); True when the lock may now be free (something
    was ended, or nobody held it). Never ends a session of its own host (``conn.owner_tag``).

    Raises:
        QueueStoreError: the server failed, or refused to end a session (a privilege).
    """
    with conn.session(f"take over {conversation_id!r} from a stale owner") as cur:
        cur.execute(
            "SELECT c.lock_key, o.owner, o.heartbeat_at < now() - make_interval(secs => %s)"
            " AS stale FROM conversations c"
            " LEFT JOIN conversation_owners o ON o.conversation_id = c.id WHERE c.id = %s",
            (stale_after_s, conversation_id),
        )
        row = cur.fetchone()
        if row is None:
            raise UnknownConversationError(conn.name, conversation_id)
        holder = _holder(cur, int(row["lock_key"]))
        if holder is None:
            return True
        if not row["stale"] or row["owner"] == conn.owner_tag or holder == conn.backend_pid:
            return False
        cur.execute(
            "SELECT pid, pg_terminate_backend(pid, %(wait_ms)s) AS ended FROM pg_stat_activity"
            " WHERE (pid = %(holder)s OR application_name = %(app)s)"
            " AND pid <> pg_backend_pid()",
            {
                "wait_ms": int(TERMINATE_WAIT_S * 1000),
                "holder": holder,
                "app": f"acp-bridge:{row['owner']}",
            },
        )
        return any(ended["ended"] for ended in cur.fetchall())


def lock_holder(conn: PgConnection, conversation_id: str) -> int | None:
    """The server pid of the session holding the conversation's lease now, or None (nobody
    owns it: its last owner let go, or its session ended).

    Raises:
        UnknownConversationError: no such conversation.
    """
    with conn.session(f"find the owner of {conversation_id!r}") as cur:
        cur.execute("SELECT lock_key FROM conversations WHERE id = %s", (conversation_id,))
        row = cur.fetchone()
        if row is None:
            raise UnknownConversationError(conn.name, conversation_id)
        return _holder(cur, int(row["lock_key"]))


@record
class LeaseRow:
    """What the lease table says of a conversation's owner: its tag (``host:pid:random``,
    see :func:`~.store.host_tag`), generation, the age of its heartbeat in seconds, and
    whether a live session holds the lease now."""

    owner: str
    generation: int
    heartbeat_age_s: float
    held: bool

    @property
    def host(self) -> str:
        """The owner's host name, from its tag."""
        return self.owner.rsplit(":", 2)[0]

    @property
    def pid(self) -> int | None:
        """The owner's process id on its host, from its tag."""
        parts = self.owner.rsplit(":", 2)
        return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def lease_row(conn: PgConnection, conversation_id: str) -> LeaseRow | None:
    """The conversation's lease row (None: nobody ever took it), and whether it is held now.

    Raises:
        UnknownConversationError: no such conversation.
    """
    with conn.session(f"read the owner of {conversation_id!r}") as cur:
        cur.execute(
            "SELECT c.lock_key, o.owner, o.generation,"
            " EXTRACT(EPOCH FROM now() - o.heartbeat_at)::float8 AS age FROM conversations c"
            " LEFT JOIN conversation_owners o ON o.conversation_id = c.id WHERE c.id = %s",
            (conversation_id,),
        )
        row = cur.fetchone()
        if row is None:
            raise UnknownConversationError(conn.name, conversation_id)
        if row["owner"] is None:
            return None
        held = _holder(cur, int(row["lock_key"])) is not None
        return LeaseRow(str(row["owner"]), int(row["generation"]), float(row["age"]), held)


def _holder(cur: Cursor, key: int) -> int | None:
    """The pid of the session holding the advisory lock ``key``, or None."""
    # A bigint key is shown in pg_locks as classid (high 32 bits), objid (low), objsubid 1.
    cur.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
    )
    row = cur.fetchone()
    return None if row is None else int(row["pid"])


def _unlock(conn: PgConnection, key: int) -> None:
    with conn.session("release an advisory lock") as cur:
        cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
