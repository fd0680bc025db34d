"""Ownership across hosts: one owner per conversation (an advisory lock on its session), a
fencing token in every write, and take-over from a dead or stopped owner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.conversations import PgConversations
from acp_bridge.pgstore.lease import (
    FENCE,
    Lease,
    LeaseLostError,
    acquire,
    fenced,
    heartbeat,
    release,
    take_over_stale,
    try_acquire,
)
from acp_bridge.pgstore.queue import PgQueue
from acp_bridge.pgstore.sql import begin_fenced
from tests.conversation.stores import text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def host_b(pg: PgConnection) -> Iterator[PgConnection]:
    with PgConnection.open(pg._url, owner_tag="b") as conn:
        yield conn


def _terminate(conn: PgConnection, pid: int) -> None:
    with conn.session("terminate") as cur:
        cur.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def test_one_session_gets_the_lease_and_another_does_not(
    pg: PgConnection, host_b: PgConnection
) -> None:
    first = try_acquire(pg, "c")
    assert first is not None and first.generation == 1
    assert try_acquire(host_b, "c") is None
    assert try_acquire(pg, "c") is None  # never counted twice on one session
    release(pg, first)
    second = try_acquire(host_b, "c")
    assert second is not None and second.generation == 2


def test_a_killed_owner_session_frees_the_lease_and_its_old_writes_are_fenced(
    pg: PgConnection, host_b: PgConnection
) -> None:
    PgQueue(pg).add_message("c", text("a"), now=2.0)
    old = acquire(pg, "c")
    assert old is not None
    _terminate(host_b, pg.backend_pid)  # the server ends the owner's session: lock released
    new = acquire(host_b, "c")
    assert new is not None and new.generation == old.generation + 1
    with pytest.raises(QueueStoreError):  # the old session is gone
        PgQueue(pg).mark_running(old, 1, now=3.0)
    with PgConnection.open(pg._url, owner_tag="a") as back:  # the old owner reconnects
        with pytest.raises(LeaseLostError, match="generation 1"):
            PgQueue(back).mark_running(old, 1, now=3.0)
        with pytest.raises(LeaseLostError):
            PgConversations(back).add_event(old, "late", {}, now=3.0)
        assert heartbeat(back, [old]) == [old]
    assert PgQueue(host_b).mark_running(new, 1, now=4.0)
    assert [e.kind for e in PgConversations(host_b).events("c")] == []


def test_the_fence_is_in_the_statement_itself(pg: PgConnection, host_b: PgConnection) -> None:
    old = acquire(pg, "c")
    assert old is not None
    release(pg, old)
    assert acquire(host_b, "c") is not None
    stale_write = f"UPDATE conversations SET title = 'old' WHERE id = %(cid)s AND {FENCE}"
    with pytest.raises(LeaseLostError), pg.transaction("a write with no check first") as cur:
        fenced(cur, pg.name, old, stale_write, {"cid": "c"})
    with pytest.raises(ValueError, match="must carry FENCE"), pg.transaction("unfenced") as cur:
        fenced(cur, pg.name, old, "UPDATE conversations SET title = 'x'", {})
    record = PgConversations(pg).get_conversation("c")
    assert record is not None and record.title is None


def test_a_live_owner_is_not_taken_over_and_a_stale_one_is(
    pg: PgConnection, host_b: PgConnection
) -> None:
    held = acquire(pg, "c")
    assert held is not None
    assert heartbeat(pg, [held]) == []
    assert acquire(host_b, "c", stale_after_s=3600) is None
    assert try_acquire(pg, "c") is None
    # Its heartbeat is older than 0 s at once: stale, so its sessions are ended.
    taken = acquire(host_b, "c", stale_after_s=0)
    assert taken is not None and taken.generation == held.generation + 1
    assert not take_over_stale(host_b, "c", stale_after_s=0)  # never ourselves


def test_a_stopped_owner_is_taken_over_and_writes_nothing_after_it_continues(
    pg: PgConnection, host_b: PgConnection
) -> None:
    """Issue 23: a partitioned (SIGSTOPped) owner keeps its session, so its lock: the next
    host sees its heartbeat is stale, ends its sessions and takes the lease; continued, the
    old owner can write nothing, on its old session or a new one."""
    PgQueue(pg).add_message("c", text("a"), now=2.0)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with subprocess.Popen(
        [sys.executable, "-m", "tests.pg.lease_holder", pg._url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env=env, text=True,
    ) as holder:  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdin is not None
            held = json.loads(holder.stdout.readline())
            holder.send_signal(signal.SIGSTOP)
            assert try_acquire(host_b, "c") is None  # its session still holds it
            taken = acquire(host_b, "c", stale_after_s=0)
            assert taken is not None and taken.generation == held["generation"] + 1
            holder.send_signal(signal.SIGCONT)
            holder.stdin.write("go\n")
            holder.stdin.flush()
            outcome = json.loads(holder.stdout.readline())
            # its old session was ended by the take-over; a new one is fenced
            assert outcome == {
                "old_session": "ConnectionLostError",
                "new_session": "LeaseLostError",
            }
            assert holder.wait(timeout=60) == 0
        finally:
            holder.send_signal(signal.SIGCONT)
            holder.kill()
    message = PgQueue(host_b).get_message("c", 1)
    assert message is not None and (message.state, message.attempts) == ("queued", 0)


def test_a_take_over_waits_for_the_old_owners_open_write_and_fences_the_next(
    pg: PgConnection, host_b: PgConnection
) -> None:
    """The fence cannot race the take-over: the old owner's lease session is gone, but its
    write session is inside a fenced transaction; the new owner's acquire waits for that
    transaction (the conversation's row lock), and the old owner's next write is fenced."""
    PgQueue(pg).add_message("c", text("a"), now=2.0)
    old = acquire(pg, "c")
    assert old is not None
    taken: list[Lease | None] = []
    b_pid = host_b.backend_pid
    with (
        PgConnection.open(pg._url, owner_tag="a") as writer,
        PgConnection.open(pg._url, owner_tag="observer") as observer,
    ):
        with writer.transaction("an owner write in flight") as cur:
            begin_fenced(cur, writer.name, old)
            _terminate(host_b, pg.backend_pid)  # the lease session dies meanwhile
            thread = threading.Thread(target=lambda: taken.append(acquire(host_b, "c")))
            thread.start()
            assert _wait_for_lock_wait(observer, b_pid)
            assert not taken  # the bump waits for this transaction
            stmt = f"UPDATE messages SET attempts = 7 WHERE conversation_id = %(cid)s AND {FENCE}"
            assert fenced(cur, writer.name, old, stmt, {"cid": "c"}) == 1
        thread.join(timeout=60)
        assert taken and taken[0] is not None and taken[0].generation == old.generation + 1
        with pytest.raises(LeaseLostError):
            PgQueue(writer).mark_running(old, 1, now=3.0)
    message = PgQueue(host_b).get_message("c", 1)
    assert message is not None and (message.attempts, message.state) == (7, "queued")


def _wait_for_lock_wait(conn: PgConnection, pid: int) -> bool:
    """Until session ``pid`` waits for a lock (True), or 30 s passed (False)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with conn.session("look at the waiter") as cur:
            cur.execute(
                "SELECT wait_event_type = 'Lock' AS waiting FROM pg_stat_activity WHERE pid = %s",
                (pid,),
            )
            row = cur.fetchone()
        if row is not None and row["waiting"]:
            return True
        time.sleep(0.01)  # the other session gets to its lock on its own; nothing to wait on
    return False


def test_a_lease_needs_a_connection_that_names_its_host(pg: PgConnection) -> None:
    with PgConnection.open(pg._url) as anonymous, pytest.raises(ValueError, match="owner tag"):
        try_acquire(anonymous, "c")
