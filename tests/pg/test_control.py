"""The ``control`` table (issue 23): a request a verb stores for a conversation's owner, and the
owner's desk that acts on the pending ones and answers each once. Both anyio backends (the
store runs in worker threads)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore import control
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.control import ControlDesk, ControlRequest
from acp_bridge.pgstore.lease import acquire
from acp_bridge.pgstore.notify import (
    CONTROL_ANSWER_CHANNEL,
    CONTROL_CHANNEL,
    Listener,
    Notification,
)
from acp_bridge.pgstore.queue import PgQueue
from acp_bridge.pgstore.store import PgStore
from tests.conversation.stores import AGENT, text

pytestmark = pytest.mark.anyio


def test_a_cancel_names_the_running_message_and_a_stop_names_none(pg: PgConnection) -> None:
    queue = PgQueue(pg)
    queue.add_message("c", text("one"), now=2.0)
    asked = control.ask(pg, "c", "cancel", asked_by="verb")
    assert asked.seq is None  # nothing ran when it was asked
    lease = acquire(pg, "c")
    assert lease is not None
    assert queue.mark_running(lease, 1, now=3.0)
    cancel = control.ask(pg, "c", "cancel")
    stop = control.ask(pg, "c", "stop")
    assert (cancel.seq, stop.seq) == (1, 1)
    assert [r.id for r in control.pending(pg)] == [asked.id, cancel.id, stop.id]
    assert [r.id for r in control.pending(pg, "c")] == [asked.id, cancel.id, stop.id]
    assert control.pending(pg, "other") == []
    with pytest.raises(QueueStoreError, match="nowhere"):
        control.ask(pg, "nowhere", "stop")


def test_an_answer_is_written_once_and_read_back(pg: PgConnection) -> None:
    asked = control.ask(pg, "c", "stop")
    assert control.outcome(pg, asked.id) is None
    assert control.answer(pg, asked.id, {"cancelled": False, "queued": 0})
    assert not control.answer(pg, asked.id, {"cancelled": True, "seq": 9})  # once
    assert control.outcome(pg, asked.id) == {"cancelled": False, "queued": 0}
    assert control.pending(pg) == []


def test_rows_older_than_the_keep_bound_are_void_and_pruned(pg: PgConnection) -> None:
    old = control.ask(pg, "c", "stop")
    with pg.transaction("age it") as cur:
        cur.execute(
            "UPDATE control SET asked_at = now() - make_interval(secs => %s) WHERE id = %s",
            (control.CONTROL_KEEP_S + 60, old.id),
        )
    assert control.pending(pg) == []  # void: nobody acts on it any more
    fresh = control.ask(pg, "c", "cancel")  # the next request prunes it
    with pg.transaction("count") as cur:
        cur.execute("SELECT id FROM control ORDER BY id")
        assert [row["id"] for row in cur.fetchall()] == [fresh.id]


async def test_the_desk_acts_on_its_own_pending_requests_and_answers_each_once(
    pg_url: str,
) -> None:
    with PgStore.open(pg_url) as store:
        mine = store.create_conversation("mine", agent=AGENT, cwd="/w", now=1.0)
        store.create_conversation("theirs", agent=AGENT, cwd="/w", now=1.0)
        acted: list[ControlRequest] = []

        async def act(request: ControlRequest) -> dict[str, Any] | None:
            if request.conversation_id != mine.id:
                return None  # not ours: left for its owner
            acted.append(request)
            if request.kind == "cancel":
                raise QueueStoreError("the lease was lost")  # answered as an error
            return {"cancelled": False, "queued": 0}

        desk = ControlDesk(store, act)
        answers: list[Notification] = []
        answered = anyio.Event()

        def woken(notification: Notification) -> None:
            answers.append(notification)
            if sum(n.channel == CONTROL_ANSWER_CHANNEL for n in answers) == 2:
                answered.set()

        listener = Listener(store.url, woken, channels=(CONTROL_ANSWER_CHANNEL, CONTROL_CHANNEL))
        async with anyio.create_task_group() as tg:
            await tg.start(listener.run)
            stop = await anyio.to_thread.run_sync(store.request_control, "mine", "stop")
            cancel = await anyio.to_thread.run_sync(store.request_control, "mine", "cancel")
            theirs = await anyio.to_thread.run_sync(store.request_control, "theirs", "stop")
            async with anyio.create_task_group() as sweeps:  # two at once: each acts once
                sweeps.start_soon(desk.sweep)
                sweeps.start_soon(desk.sweep, "mine")
            with anyio.fail_after(30):
                await answered.wait()
            tg.cancel_scope.cancel()
        assert [r.id for r in acted] == [stop.id, cancel.id]
        assert store.control_outcome(stop.id) == {"cancelled": False, "queued": 0}
        assert store.control_outcome(cancel.id) == {
            "cancelled": False,
            "error": "the lease was lost",
        }
        assert store.control_outcome(theirs.id) is None
        assert [r.id for r in store.pending_controls()] == [theirs.id]
        channels = [(n.channel, n.conversation_id) for n in answers]
        assert channels[:3] == [(CONTROL_CHANNEL, "mine")] * 2 + [(CONTROL_CHANNEL, "theirs")]
        assert channels[3:] == [(CONTROL_ANSWER_CHANNEL, "mine")] * 2
