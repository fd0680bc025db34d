"""The PostgreSQL queue keeps the SQLite store's guarantees: FIFO, one final state per message,
one running message, usage counted once, recovery after a dead owner; and every owner write is
fenced by the lease."""

from __future__ import annotations

import pytest

from acp_bridge.conversation.records import FinishedTurn
from acp_bridge.conversation.usage import CostMeter, UsageTotals
from acp_bridge.errors import AlreadyRunningError, UnknownConversationError, UnknownMessageError
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.conversations import PgConversations
from acp_bridge.pgstore.lease import Lease, acquire
from acp_bridge.pgstore.queue import PgQueue
from tests.conversation.stores import AGENT, text

FAILURE = {"code": "agent_exited", "message": "the agent exited", "details": {}}


@pytest.fixture
def lease(pg: PgConnection) -> Lease:
    held = acquire(pg, "c")
    assert held is not None
    return held


@pytest.fixture
def queue(pg: PgConnection) -> PgQueue:
    return PgQueue(pg)


def drain(queue: PgQueue, lease: Lease) -> list[int]:
    """Run every queued message to done, in queue order; the seqs run."""
    ran: list[int] = []
    while (message := queue.next_queued("c")) is not None:
        assert queue.mark_running(lease, message.seq, now=3.0)
        assert queue.finish(lease, message.seq, "done", stop_reason="end_turn", now=4.0)
        ran.append(message.seq)
    return ran


def test_messages_are_served_in_order_one_turn_each(queue: PgQueue, lease: Lease) -> None:
    for word in ("a", "b", "c"):
        queue.add_message("c", text(word), now=2.0)
    assert drain(queue, lease) == [1, 2, 3]
    assert queue.next_queued("c") is None
    assert [m.state for m in queue.messages("c")] == ["done"] * 3


def test_a_message_sent_next_goes_ahead_of_every_queued_one(queue: PgQueue, lease: Lease) -> None:
    queue.add_message("c", text("a"), now=2.0)
    queue.add_message("c", text("b"), now=2.0)
    queue.add_message("c", text("now"), next=True, now=2.0)
    queue.add_message("c", text("sooner"), next=True, now=2.0)
    assert [m.seq for m in queue.queued("c")] == [4, 3, 1, 2]
    assert drain(queue, lease) == [4, 3, 1, 2]


def test_finish_is_exactly_once_and_counts_usage_once(
    pg: PgConnection, queue: PgQueue, lease: Lease
) -> None:
    queue.add_message("c", text("a"), now=2.0)
    assert queue.mark_running(lease, 1, now=3.0)
    spent = UsageTotals({"inputTokens": 10, "outputTokens": 5}, {"USD": 0.5})
    turn = FinishedTurn("the reply", False, spent, CostMeter("s", {"USD": 0.5}))
    assert queue.finish(lease, 1, "done", stop_reason="end_turn", now=4.0, turn=turn)
    first = queue.get_message("c", 1)
    late = FinishedTurn("late", False, spent, CostMeter("s", {"USD": 1.0}))
    assert not queue.finish(lease, 1, "failed", error=FAILURE, recoverable=True, now=5.0, turn=late)
    assert queue.get_message("c", 1) == first
    assert first is not None and (first.reply, first.finished_at) == ("the reply", 4.0)
    assert first.usage == spent
    assert PgConversations(pg).usage("c") == spent


def test_only_one_message_runs_and_only_a_queued_one_starts(queue: PgQueue, lease: Lease) -> None:
    queue.add_message("c", text("a"), now=2.0)
    queue.add_message("c", text("b"), now=2.0)
    assert queue.mark_running(lease, 1, now=3.0)
    assert queue.mark_running(lease, 1, now=3.5) is False
    with pytest.raises(AlreadyRunningError, match="still running message 1"):
        queue.mark_running(lease, 2, now=4.0)
    assert queue.finish(lease, 2, "cancelled", now=4.0)  # a stop before it ran
    assert queue.mark_running(lease, 2, now=5.0) is False


def test_recover_after_crash_fails_the_cut_turn_recoverably_once(
    pg: PgConnection, queue: PgQueue, lease: Lease
) -> None:
    queue.add_message("c", text("a"), now=2.0)
    queue.add_message("c", text("b"), now=2.0)
    queue.mark_running(lease, 1, now=3.0)
    owner = pg.backend_pid
    with PgConnection.open(pg._url, owner_tag="next") as conn:
        # The owner dies: the server ends its session, and returns once it is gone with its
        # lock (a client-side close alone released it a moment later: once, under load, the
        # next acquire came first).
        with conn.session("the owner dies") as cur:
            cur.execute("SELECT pg_terminate_backend(%s, 5000)", (owner,))
        pg.close()
        taken = acquire(conn, "c")
        assert taken is not None and taken.generation == lease.generation + 1
        queue = PgQueue(conn)
        assert queue.recover_after_crash(taken, now=5.0) == [1]
        assert queue.recover_after_crash(taken, now=6.0) == []
        cut = queue.get_message("c", 1)
        assert cut is not None and (cut.state, cut.recoverable) == ("failed", True)
        assert cut.error is not None and cut.error["code"] == "bridge_stopped"
        assert drain(queue, taken) == [2]  # the one never prompted; never message 1 again


def test_requeue_is_an_explicit_retry_and_never_of_a_done_message(
    queue: PgQueue, lease: Lease
) -> None:
    queue.add_message("c", text("a"), now=2.0)
    queue.add_message("c", text("b"), now=2.0)
    queue.mark_running(lease, 1, now=3.0)
    queue.finish(lease, 1, "failed", error=FAILURE, recoverable=True, now=4.0)
    assert queue.requeue(lease, 1, next=True, now=5.0)
    retried = queue.get_message("c", 1)
    assert retried is not None and (retried.state, retried.error, retried.attempts) == (
        "queued", None, 1,
    )  # fmt: skip
    assert drain(queue, lease) == [1, 2]
    assert queue.requeue(lease, 2, next=False, now=6.0) is False


def test_unknown_conversations_and_messages_raise(queue: PgQueue, lease: Lease) -> None:
    with pytest.raises(UnknownConversationError):
        queue.add_message("nope", text("a"), now=2.0)
    with pytest.raises(UnknownConversationError):
        queue.next_queued("nope")
    with pytest.raises(UnknownMessageError):
        queue.finish(lease, 9, "cancelled", now=2.0)
    assert queue.get_message("c", 9) is None


def test_bad_states_and_missing_outcomes_are_value_errors(queue: PgQueue, lease: Lease) -> None:
    queue.add_message("c", text("a"), now=2.0)
    with pytest.raises(ValueError, match="not a final state"):
        queue.finish(lease, 1, "running", now=3.0)
    with pytest.raises(ValueError, match="stop_reason"):
        queue.finish(lease, 1, "done", now=3.0)
    with pytest.raises(ValueError, match="error and recoverable"):
        queue.finish(lease, 1, "failed", now=3.0)


def test_events_page_after_a_cursor_and_a_state_change_logs_with_its_event(
    pg: PgConnection, queue: PgQueue, lease: Lease
) -> None:
    log = PgConversations(pg)
    queue.add_message("c", text("a"), now=2.0)
    queue.mark_running(lease, 1, now=3.0, event=("turn_started", {"seq": 1}))
    log.add_events(lease, [("update", {"n": n}, 1) for n in range(3)], now=3.5)
    queue.finish(lease, 1, "done", stop_reason="end_turn", now=4.0, event=("turn_ended", {}))
    events = log.events("c")
    assert [e.kind for e in events] == ["turn_started", "update", "update", "update", "turn_ended"]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert log.events("c", after_id=events[1].id, limit=2) == events[2:4]
    assert log.events("c", after_id=events[-1].id) == []
    with pytest.raises(UnknownMessageError):
        log.add_event(lease, "update", {}, seq=7, now=5.0)


def test_conversations_are_created_once_and_changed_by_their_owner(
    pg: PgConnection, lease: Lease
) -> None:
    log = PgConversations(pg)
    created = log.create_conversation(agent=AGENT, cwd="/elsewhere", title="t", now=2.0)
    assert log.get_conversation(created.id) == created
    with pytest.raises(Exception, match="already exists"):
        log.create_conversation(created.id, agent=AGENT, cwd="/elsewhere", now=2.0)
    changed = log.update_conversation(lease, now=3.0, session_id="s1", paused=True, config={"m": 1})
    assert (changed.session_id, changed.paused, changed.config, changed.updated_at) == (
        "s1", True, {"m": 1}, 3.0,
    )  # fmt: skip


def test_the_queue_state_is_the_history_then_the_queue_with_only_queued_content(
    queue: PgQueue, lease: Lease
) -> None:
    for word in ("a", "b", "c"):
        queue.add_message("c", text(word), now=2.0)
    queue.mark_running(lease, 1, now=3.0)
    queue.finish(lease, 1, "done", stop_reason="end_turn", now=4.0)
    queue.add_message("c", text("first"), next=True, now=5.0)
    records, prompts = queue.queue_state("c")
    assert [(r.seq, r.state) for r in records] == [
        (1, "done"), (4, "queued"), (2, "queued"), (3, "queued"),
    ]  # fmt: skip
    assert prompts == {2: text("b"), 3: text("c"), 4: text("first")}
