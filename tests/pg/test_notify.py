"""LISTEN/NOTIFY: a message sent through any connection wakes the owner's listener within
milliseconds, and concurrent senders on several connections keep FIFO order and one final state
per message. Both anyio backends (the store's connections run in worker threads)."""

from __future__ import annotations

import statistics
import time
from functools import partial

import anyio
import pytest

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.lease import acquire
from acp_bridge.pgstore.notify import EVENTS_CHANNEL, QUEUE_CHANNEL, Listener, Notification
from acp_bridge.pgstore.queue import PgQueue
from tests.conversation.stores import text

pytestmark = pytest.mark.anyio

ROUNDS = 30
SENDERS = 4
PER_SENDER = 25


async def test_a_message_sent_elsewhere_wakes_the_listener_in_milliseconds(
    pg: PgConnection,
) -> None:
    woken: list[tuple[Notification, float]] = []
    arrived = anyio.Event()

    def on_notify(notification: Notification) -> None:
        nonlocal arrived
        woken.append((notification, time.perf_counter()))
        arrived.set()

    listener = Listener(pg._url, on_notify, channels=(QUEUE_CHANNEL, EVENTS_CHANNEL))
    delays: list[float] = []
    with PgConnection.open(pg._url, owner_tag="sender") as sender:
        queue = PgQueue(sender)
        async with anyio.create_task_group() as tg:
            await tg.start(listener.run)
            for n in range(ROUNDS):
                arrived = anyio.Event()
                sent = time.perf_counter()
                await anyio.to_thread.run_sync(
                    partial(queue.add_message, "c", text(f"{n}"), now=2.0)
                )
                with anyio.fail_after(30):
                    await arrived.wait()
                delays.append(woken[-1][1] - sent)
            tg.cancel_scope.cancel()
    assert [note for note, _ in woken] == [Notification(QUEUE_CHANNEL, "c")] * ROUNDS
    median_ms = statistics.median(delays) * 1000
    # Reported, not asserted: the figure depends on the machine (issue 23 asks for it).
    print(f"\nNOTIFY wake-up: median {median_ms:.2f} ms from send to listener, {ROUNDS} rounds")


async def test_a_stopped_listener_has_closed_its_connection(pg: PgConnection) -> None:
    listener = Listener(pg._url, lambda _: None, owner_tag="listening")
    async with anyio.create_task_group() as tg:
        await tg.start(listener.run)
        assert await anyio.to_thread.run_sync(_sessions_named, pg, "acp-bridge:listening") == 1
        tg.cancel_scope.cancel()
    # The client closed its side when run() returned; the server's backend exits on its own
    # schedule: wait for that (bounded), never for a fixed time.
    assert await anyio.to_thread.run_sync(_wait_sessions_gone, pg, "acp-bridge:listening")


async def test_a_listener_that_cannot_connect_says_so_without_the_password(pg_url: str) -> None:
    bad = pg_url.replace("postgres@", "nobody_here:s3cret@")
    listener = Listener(bad, lambda _: None)
    with pytest.raises(QueueStoreError) as caught:
        await listener.run()
    assert "s3cret" not in str(caught.value) and "***" in str(caught.value)


async def test_concurrent_senders_keep_fifo_and_one_final_state_per_message(
    pg: PgConnection,
) -> None:
    """Several connections send at once; the owner, woken by NOTIFY only, runs every message
    once, in the order it was committed, and each sender's messages in the order it sent them."""
    lease = acquire(pg, "c")
    assert lease is not None
    owner = PgQueue(pg)
    changed = anyio.Event()
    sent_by: dict[int, tuple[int, int]] = {}  # seq -> (sender, its n-th message)
    ran: list[int] = []

    def on_notify(_: Notification) -> None:
        changed.set()

    async def send(sender: int) -> None:
        with PgConnection.open(pg._url, owner_tag=f"sender{sender}") as conn:
            queue = PgQueue(conn)
            for n in range(PER_SENDER):
                body = text(f"{sender}:{n}")
                message = await anyio.to_thread.run_sync(
                    partial(queue.add_message, "c", body, now=2.0)
                )
                sent_by[message.seq] = (sender, n)

    async def run_owner() -> None:
        nonlocal changed
        while len(ran) < SENDERS * PER_SENDER:
            changed = anyio.Event()
            while (message := await anyio.to_thread.run_sync(owner.next_queued, "c")) is not None:
                assert await anyio.to_thread.run_sync(
                    partial(owner.mark_running, lease, message.seq, now=3.0)
                )
                done = partial(
                    owner.finish, lease, message.seq, "done", stop_reason="end_turn", now=4.0
                )
                assert await anyio.to_thread.run_sync(done)
                assert not await anyio.to_thread.run_sync(done)  # once only
                ran.append(message.seq)
            if len(ran) < SENDERS * PER_SENDER:
                with anyio.fail_after(30):
                    await changed.wait()

    listener = Listener(pg._url, on_notify)
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            await tg.start(listener.run)
            async with anyio.create_task_group() as senders:
                senders.start_soon(run_owner)
                for sender in range(SENDERS):
                    senders.start_soon(send, sender)
            tg.cancel_scope.cancel()
    total = SENDERS * PER_SENDER
    assert ran == list(range(1, total + 1))  # FIFO: commit order, each once
    for sender in range(SENDERS):
        order = [n for seq in ran for s, n in [sent_by[seq]] if s == sender]
        assert order == list(range(PER_SENDER))
    states = [m.state for m in await anyio.to_thread.run_sync(owner.messages, "c")]
    assert states == ["done"] * total


def _sessions_named(conn: PgConnection, application_name: str) -> int:
    with conn.session("count sessions") as cur:
        cur.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        )
        row = cur.fetchone()
        assert row is not None
        return int(row["n"])


def _wait_sessions_gone(conn: PgConnection, application_name: str) -> bool:
    """Until no session has that name (True), or 30 s passed (False)."""
    deadline = time.monotonic() + 30
    while _sessions_named(conn, application_name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # the server's backend exits on its own; nothing to wait on
    return True


async def test_a_listener_whose_session_is_ended_raises_so_its_owner_reconnects(
    pg: PgConnection,
) -> None:
    listener = Listener(pg._url, lambda _: None, owner_tag="doomed")
    with pytest.raises(ExceptionGroup) as caught:
        async with anyio.create_task_group() as tg:
            await tg.start(listener.run)
            await anyio.to_thread.run_sync(_end_sessions_named, pg, "acp-bridge:doomed")
            with anyio.fail_after(30):
                await anyio.sleep_forever()
    assert caught.group_contains(QueueStoreError, match="could not receive notifications")


def _end_sessions_named(conn: PgConnection, application_name: str) -> None:
    with conn.session("end sessions") as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (application_name,),
        )
