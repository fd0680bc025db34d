"""The durable queue store: durability, FIFO order, exactly-once outcomes, migrations, threads.

A test that takes ``store`` runs on both backends (SQLite, and PostgreSQL on a real server:
``any_store`` in conftest.py); the tests about SQLite's file, WAL and migrations open it
themselves."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.records import StoredMessage
from acp_bridge.conversation.schema import LATEST_VERSION, MIGRATIONS, Migration, migrate
from acp_bridge.conversation.store import QueueStore
from acp_bridge.conversation.store_api import Store
from acp_bridge.errors import (
    AlreadyRunningError,
    QueueStoreError,
    ResourceClosedError,
    UnknownConversationError,
    UnknownMessageError,
)
from tests.conversation.stores import AGENT, sqlite_of, text
from tests.lockstep import open_in_lockstep

ROOT = Path(__file__).resolve().parents[2]
FINAL = [MessageState.DONE, MessageState.CANCELLED, MessageState.SUPERSEDED, MessageState.FAILED]
FAILURE = {"code": "agent_exited", "message": "the agent exited", "details": {}}


@pytest.fixture
def store(any_store: Store) -> Store:
    """The store suite's store: SQLite, then PostgreSQL."""
    return any_store


def raw(path: Path) -> closing[sqlite3.Connection]:
    """A plain connection, as another program (or an older acp-bridge) would open the file."""
    return closing(sqlite3.connect(path, isolation_level=None))


def tamper(store: Store, statement: str) -> None:
    """Run ``statement`` on the store's tables behind its back, on either backend."""
    if isinstance(store, QueueStore):
        with raw(Path(store.path)) as conn:
            conn.execute(statement)
        return
    import psycopg

    with psycopg.connect(store.url, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute(statement.encode())


def drain(store: Store, conversation: str = "c") -> list[int]:
    """Run the queue to empty, one turn at a time, as the conversation layer would."""
    served = []
    while (message := store.next_queued(conversation)) is not None:
        assert store.mark_running(conversation, message.seq, now=10.0)
        assert store.finish(conversation, message.seq, "done", stop_reason="end_turn", now=11.0)
        served.append(message.seq)
    return served


# -- durability ------------------------------------------------------------------------------------


def test_a_message_is_durable_across_close_and_reopen(path: Path) -> None:
    with QueueStore.open(path) as store:
        store.create_conversation(
            "c", agent=AGENT, cwd="/work", mcp_servers=[{"name": "fs"}], now=1
        )
        sent = store.add_message("c", text("hello"), now=2.0)
    with QueueStore.open(path) as store:
        assert store.get_message("c", 1) == sent
        assert store.next_queued("c") == sent
        conversation = store.get_conversation("c")
        assert conversation is not None
        assert conversation.agent == AGENT and conversation.mcp_servers == [{"name": "fs"}]


KILLED_MID_TURN = textwrap.dedent(
    """
    import os, signal, sqlite3, sys
    from acp_bridge.conversation.store import QueueStore

    path = sys.argv[1]
    store = QueueStore.open(path)
    store.create_conversation("c", agent={"argv": ["agent"]}, cwd="/work", now=1.0)
    store.add_message("c", [{"type": "text", "text": "one"}], now=2.0)
    store.add_message("c", [{"type": "text", "text": "two"}], now=3.0)
    store.mark_running("c", 1, now=4.0)
    # A third message whose transaction never commits.
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute(
        "INSERT INTO messages (conversation_id, seq, position, content, state, created_at)"
        " VALUES ('c', 3, 3, '[]', 'queued', 5.0)"
    )
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_process_killed_mid_turn_keeps_every_committed_message_and_nothing_else(
    path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_MID_TURN, str(path)], env=env, timeout=30, check=False
    )
    assert child.returncode == -signal.SIGKILL
    with QueueStore.open(path) as store:
        messages = store.messages("c")
        assert [(m.seq, m.state) for m in messages] == [(1, "running"), (2, "queued")]
        assert messages[1].content == text("two")
        # The bridge that takes over fails the cut turn and goes on with the next one.
        assert store.recover_after_crash("c", now=6.0) == [1]
        assert drain(store) == [2]


def test_the_store_is_in_wal_mode_and_syncs_as_its_durability_says(tmp_path: Path) -> None:
    """process (the default): synchronous=NORMAL, a commit survives a crash of the process;
    power: synchronous=FULL, every commit fsynced."""
    for durability, synchronous in (("process", 1), ("power", 2)):
        path = tmp_path / f"{durability}.db"
        with QueueStore.open(path, durability=durability) as store:  # type: ignore[arg-type]
            with raw(path) as conn:
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            # synchronous is a per-connection setting: look at the store's own connection.
            assert sqlite_of(store).execute("PRAGMA synchronous").fetchone()[0] == synchronous
            assert sqlite_of(store).execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with QueueStore.open(tmp_path / "default.db") as store:
        assert sqlite_of(store).execute("PRAGMA synchronous").fetchone()[0] == 1
    with pytest.raises(ValueError, match="durability"):
        QueueStore.open(tmp_path / "bad.db", durability="disk")  # type: ignore[arg-type]


# -- the queue -------------------------------------------------------------------------------------


def test_messages_are_served_in_order_one_turn_each_and_then_nothing(store: Store) -> None:
    for n in range(5):
        store.add_message("c", text(f"m{n}"), now=2.0 + n)
    assert drain(store) == [1, 2, 3, 4, 5]
    # No "latest message" fallback: an empty queue stays empty, however often it is asked.
    assert store.next_queued("c") is None
    assert store.next_queued("c") is None


def test_a_message_sent_next_goes_ahead_of_every_queued_one(store: Store) -> None:
    for n in range(3):
        store.add_message("c", text(f"m{n}"), now=2.0)
    store.mark_running("c", 1, now=3.0)
    urgent = store.add_message("c", text("now!"), next=True, now=4.0)
    later = store.add_message("c", text("later"), now=5.0)
    assert (urgent.seq, later.seq) == (4, 5)  # seq stays the creation order
    store.finish("c", 1, "superseded", now=6.0)
    assert [m.seq for m in store.queued("c")] == [4, 2, 3, 5]
    assert drain(store) == [4, 2, 3, 5]


def test_the_queue_state_is_the_history_then_the_queue_with_only_queued_content(
    store: Store,
) -> None:
    """What opening a conversation reads: every message as the machine sees it (history by
    seq, then the queue by position) and the queued prompts; no reply, no finished content."""
    from acp_bridge.conversation.records import FinishedTurn
    from acp_bridge.conversation.usage import CostMeter, UsageTotals

    for name in ("a", "b", "c", "d"):
        store.add_message("c", text(name), now=2.0)
    store.add_message("c", text("urgent"), next=True, now=3.0)  # seq 5, goes first
    store.mark_running("c", 5, now=4.0)
    turn = FinishedTurn("x" * 10_000, False, UsageTotals(), CostMeter())
    store.finish("c", 5, "done", stop_reason="end_turn", now=5.0, turn=turn)
    store.mark_running("c", 1, now=6.0)
    store.finish("c", 1, "failed", error=FAILURE, recoverable=True, now=7.0)
    store.mark_running("c", 2, now=8.0)
    records, prompts = store.queue_state("c")
    stored = {m.seq: m for m in store.messages("c")}
    assert [r.seq for r in records] == [1, 2, 5, 3, 4]
    assert records == [stored[r.seq].record() for r in records]
    assert prompts == {3: text("c"), 4: text("d")}


def test_a_second_next_message_goes_ahead_of_the_first(store: Store) -> None:
    store.add_message("c", text("a"), now=2.0)
    store.add_message("c", text("b"), next=True, now=3.0)
    store.add_message("c", text("c"), next=True, now=4.0)
    assert drain(store) == [3, 2, 1]


def test_next_on_an_empty_queue_is_just_the_end_of_the_queue(store: Store) -> None:
    assert store.add_message("c", text("a"), next=True, now=2.0).seq == 1
    store.add_message("c", text("b"), now=3.0)
    assert drain(store) == [1, 2]


def test_finish_is_exactly_once(store: Store) -> None:
    store.add_message("c", text("a"), now=2.0)
    assert store.mark_running("c", 1, now=3.0)
    assert store.finish("c", 1, "done", stop_reason="end_turn", now=4.0)
    first = store.get_message("c", 1)
    assert store.finish("c", 1, "failed", error=FAILURE, recoverable=True, now=5.0) is False
    assert store.finish("c", 1, "done", stop_reason="cancelled", now=6.0) is False
    assert store.get_message("c", 1) == first
    assert first is not None and first.stop_reason == "end_turn" and first.finished_at == 4.0


def test_finish_with_the_turn_is_exactly_once_and_counts_usage_once(store: Store) -> None:
    """The statement production runs (with the turn's reply and usage) keeps the guard too."""
    from acp_bridge.conversation.records import FinishedTurn
    from acp_bridge.conversation.usage import CostMeter, UsageTotals

    store.add_message("c", text("a"), now=2.0)
    assert store.mark_running("c", 1, now=3.0)
    turn = FinishedTurn("the reply", False, UsageTotals(), CostMeter())
    assert store.finish("c", 1, "done", stop_reason="end_turn", now=4.0, turn=turn)
    first = store.get_message("c", 1)
    late = FinishedTurn("a late second reply", False, UsageTotals(), CostMeter())
    again = store.finish(
        "c", 1, "failed", error=FAILURE, recoverable=True, now=5.0, turn=late
    )
    assert again is False
    assert store.get_message("c", 1) == first
    assert first is not None and first.state == "done" and first.finished_at == 4.0


def test_a_queued_message_can_be_cancelled_before_it_runs_and_then_never_runs(
    store: Store,
) -> None:
    store.add_message("c", text("a"), now=2.0)
    store.add_message("c", text("b"), now=2.0)
    assert store.finish("c", 1, "cancelled", now=3.0)
    # The loop had picked message 1 before the stop landed: starting it now is refused.
    assert store.mark_running("c", 1, now=4.0) is False
    assert drain(store) == [2]
    message = store.get_message("c", 1)
    assert message is not None and message.attempts == 0 and message.started_at is None


def test_mark_running_counts_attempts_and_only_starts_a_queued_message(store: Store) -> None:
    store.add_message("c", text("a"), now=2.0)
    assert store.mark_running("c", 1, now=3.0)
    assert store.mark_running("c", 1, now=4.0) is False
    message = store.get_message("c", 1)
    assert message is not None
    assert (message.state, message.attempts, message.started_at) == ("running", 1, 3.0)


def test_only_one_message_of_a_conversation_runs_at_a_time(store: Store) -> None:
    store.add_message("c", text("a"), now=2.0)
    store.add_message("c", text("b"), now=2.0)
    store.mark_running("c", 1, now=3.0)
    with pytest.raises(AlreadyRunningError, match="still running message 1") as caught:
        store.mark_running("c", 2, now=4.0)
    assert caught.value.running_seq == 1
    assert store.get_message("c", 2) == store.next_queued("c")


def test_conversations_have_separate_queues(store: Store) -> None:
    store.create_conversation("d", agent=AGENT, cwd="/work", now=1.0)
    store.add_message("c", text("c1"), now=2.0)
    store.add_message("d", text("d1"), now=2.0)
    store.mark_running("c", 1, now=3.0)
    assert store.mark_running("d", 1, now=3.0)  # one running per conversation, not per store
    assert [m.seq for m in store.messages("d")] == [1]


def test_recover_after_crash_fails_the_cut_turn_recoverably_once(store: Store) -> None:
    for n in range(3):
        store.add_message("c", text(f"m{n}"), now=2.0)
    store.mark_running("c", 1, now=3.0)
    assert store.recover_after_crash("c", now=9.0) == [1]
    assert store.recover_after_crash("c", now=10.0) == []
    cut = store.get_message("c", 1)
    assert cut is not None
    assert (cut.state, cut.recoverable, cut.finished_at) == ("failed", True, 9.0)
    assert cut.error == {
        "code": "bridge_stopped",
        "message": "the bridge stopped during this turn",
        "details": {},
    }
    # It is never prompted again by itself; the queue goes on with what was never prompted.
    assert drain(store) == [2, 3]


def test_requeue_is_an_explicit_retry_from_cancelled_superseded_or_failed(
    store: Store,
) -> None:
    for n in range(5):
        store.add_message("c", text(f"m{n}"), now=2.0)
    for seq, state in [(1, "cancelled"), (2, "superseded"), (3, "failed")]:
        store.mark_running("c", seq, now=3.0)
        store.finish("c", seq, state, error=FAILURE, recoverable=True, now=4.0)
    assert store.requeue("c", 1, next=False, now=5.0)
    assert store.requeue("c", 2, next=True, now=5.0)
    assert store.requeue("c", 3, next=True, now=5.0)
    retried = store.get_message("c", 3)
    assert retried is not None
    assert (retried.state, retried.attempts, retried.error, retried.recoverable) == (
        "queued", 1, None, None,
    )  # fmt: skip
    assert drain(store) == [3, 2, 4, 5, 1]
    assert [m.attempts for m in store.messages("c")] == [2, 2, 2, 1, 1]


def test_requeue_refuses_a_done_queued_or_running_message(store: Store) -> None:
    for n in range(3):
        store.add_message("c", text(f"m{n}"), now=2.0)
    store.mark_running("c", 1, now=3.0)
    store.finish("c", 1, "done", stop_reason="end_turn", now=4.0)
    store.mark_running("c", 2, now=5.0)
    before = store.messages("c")
    assert [store.requeue("c", seq, next=True, now=6.0) for seq in (1, 2, 3)] == [False] * 3
    assert store.messages("c") == before


def test_unknown_conversations_and_messages_raise(store: Store) -> None:
    assert store.get_conversation("nope") is None
    assert store.get_message("c", 7) is None
    with pytest.raises(UnknownConversationError, match="no conversation 'nope'"):
        store.add_message("nope", text("a"), now=2.0)
    with pytest.raises(UnknownConversationError):
        store.next_queued("nope")
    with pytest.raises(UnknownConversationError):
        store.get_message("nope", 1)
    with pytest.raises(UnknownMessageError, match="has no message 7"):
        store.mark_running("c", 7, now=2.0)
    with pytest.raises(UnknownMessageError):
        store.finish("c", 7, "cancelled", now=2.0)
    with pytest.raises(UnknownMessageError):
        store.requeue("c", 7, next=False, now=2.0)
    with pytest.raises(UnknownMessageError):
        store.add_event("c", "turn_started", {}, seq=7, now=2.0)
    with pytest.raises(QueueStoreError, match="already exists"):
        store.create_conversation("c", agent=AGENT, cwd="/work", now=2.0)


def test_bad_states_and_missing_outcomes_are_value_errors(store: Store) -> None:
    store.add_message("c", text("a"), now=2.0)
    with pytest.raises(ValueError, match="not a valid"):
        store.finish("c", 1, "finished", now=3.0)
    with pytest.raises(ValueError, match="not a final state"):
        store.finish("c", 1, "running", now=3.0)
    with pytest.raises(ValueError, match="stop_reason"):
        store.finish("c", 1, "done", now=3.0)
    with pytest.raises(ValueError, match="error and recoverable"):
        store.finish("c", 1, "failed", error=FAILURE, now=3.0)
    with pytest.raises(ValueError, match="not a valid"):
        store.messages("c", states=["pending"])
    with pytest.raises(TypeError, match="expected a list, not str"):
        store.add_message("c", "just text", now=3.0)
    with pytest.raises(TypeError, match="expected a list, not str"):
        store.update_conversation("c", additional_directories="/tmp", now=3.0)
    assert [m.seq for m in store.messages("c")] == [1]


def test_messages_can_be_filtered_by_state(store: Store) -> None:
    for n in range(4):
        store.add_message("c", text(f"m{n}"), now=2.0)
    store.finish("c", 2, "cancelled", now=3.0)
    store.mark_running("c", 3, now=3.0)
    assert [m.seq for m in store.messages("c", states=["queued", "running"])] == [1, 3, 4]
    assert [m.seq for m in store.messages("c", states=[MessageState.CANCELLED])] == [2]
    assert store.messages("c", states=[]) == []


def test_the_next_queued_message_is_an_index_lookup_not_a_scan_of_history() -> None:
    def steps_to_find_the_next(history: int) -> int:
        with QueueStore.open(":memory:") as store:
            store.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
            for n in range(history):
                store.add_message("c", text(f"old {n}"), now=2.0)
                store.finish("c", n + 1, "cancelled", now=3.0)
            store.add_message("c", text("new"), now=4.0)
            steps = 0

            def count() -> int:
                nonlocal steps
                steps += 1
                return 0

            sqlite_of(store).set_progress_handler(count, 1)
            assert store.next_queued("c") is not None
            sqlite_of(store).set_progress_handler(None, 1)
            return steps

    small, large = steps_to_find_the_next(5), steps_to_find_the_next(3000)
    assert large < 2 * small, (small, large)


# -- conversations and events ----------------------------------------------------------------------


def test_update_conversation_changes_only_the_fields_given(store: Store) -> None:
    before = store.get_conversation("c")
    after = store.update_conversation("c", session_id="sess-2", paused=True, now=5.0)
    assert before is not None
    assert (after.session_id, after.paused, after.updated_at) == ("sess-2", True, 5.0)
    assert (after.agent, after.cwd, after.config) == (before.agent, before.cwd, before.config)
    again = store.update_conversation("c", config={"mode": "plan"}, mcp_servers=[], now=6.0)
    assert (again.session_id, again.paused, again.config) == ("sess-2", True, {"mode": "plan"})
    assert store.update_conversation("c", session_id=None, now=7.0).session_id is None
    with pytest.raises(TypeError, match="unknown fields"):
        store.update_conversation("c", cwd="/elsewhere", now=8.0)  # type: ignore[call-arg]


def test_a_new_send_can_unpause_the_conversation_in_the_same_transaction(
    store: Store,
) -> None:
    store.update_conversation("c", paused=True, now=2.0)
    store.add_message("c", text("a"), now=3.0)
    conversation = store.get_conversation("c")
    assert conversation is not None and conversation.paused
    store.add_message("c", text("b"), unpause=True, now=4.0)
    conversation = store.get_conversation("c")
    assert conversation is not None and not conversation.paused


def test_the_latest_conversation_is_the_most_recently_updated(path: Path) -> None:
    with QueueStore.open(path) as store:
        assert store.latest_conversation() is None
        generated = store.create_conversation(agent=AGENT, cwd="/a", now=1.0)
        store.create_conversation("b", agent=AGENT, cwd="/b", now=2.0)
        assert len(generated.id) == 32
        latest = store.latest_conversation()
        assert latest is not None and latest.id == "b"
        store.add_message(generated.id, text("hi"), now=3.0)
        latest = store.latest_conversation()
        assert latest is not None and latest.id == generated.id
        # A clock that stepped back does not make a conversation look older.
        store.add_message("b", text("hi"), now=2.5)
        assert [c.id for c in store.list_conversations()] == [generated.id, "b"]
        # Events do not count as an update.
        store.add_event("b", "update", {}, now=9.0)
        latest = store.latest_conversation()
        assert latest is not None and latest.id == generated.id


def test_events_come_back_in_order_and_page_by_id(store: Store) -> None:
    store.add_message("c", text("a"), now=2.0)
    ids = [
        store.add_event("c", "turn_started", {"seq": 1}, seq=1, now=3.0),
        store.add_event("c", "update", {"chunk": "héllo"}, seq=1, now=3.1),
        store.add_event("c", "turn_ended", {"stopReason": "end_turn"}, seq=1, now=3.2),
        store.add_event("c", "agent_exited", {"returncode": 1}, now=3.3),
    ]
    assert ids == sorted(ids)
    events = store.events("c")
    assert [(e.kind, e.seq) for e in events] == [
        ("turn_started", 1), ("update", 1), ("turn_ended", 1), ("agent_exited", None),
    ]  # fmt: skip
    assert events[1].data == {"chunk": "héllo"} and events[1].ts == 3.1
    assert [e.id for e in store.events("c", after_id=ids[1])] == ids[2:]
    assert [e.id for e in store.events("c", after_id=ids[0], limit=2)] == ids[1:3]
    with pytest.raises(UnknownConversationError):
        store.events("nope")


def test_a_store_used_after_close_says_so(path: Path) -> None:
    store = QueueStore.open(path)
    store.close()
    store.close()
    assert "CLOSED" in repr(store)
    with pytest.raises(ResourceClosedError):
        store.latest_conversation()


# -- threads and processes -------------------------------------------------------------------------


def test_adds_from_many_threads_keep_seqs_unique_dense_and_in_order(store: Store) -> None:
    # Eight threads on the store's one connection. PostgreSQL pays a round trip per call: 8 x 200
    # adds and their drain took 7-43 s; 50 each still interleave the threads (a store that lets
    # them share the connection unlocked fails with 50 as with 200).
    threads, per_thread = 8, (200 if isinstance(store, QueueStore) else 50)
    start = threading.Barrier(threads)
    seqs: dict[int, list[int]] = {}

    def send(worker: int) -> None:
        start.wait()
        seqs[worker] = [
            store.add_message("c", text(f"{worker}:{n}"), now=2.0).seq for n in range(per_thread)
        ]

    workers = [threading.Thread(target=send, args=(w,)) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    everything = sorted(seq for mine in seqs.values() for seq in mine)
    assert everything == list(range(1, threads * per_thread + 1))
    served = drain(store)
    for mine in seqs.values():  # each sender's messages are served in the order it sent them
        assert [seq for seq in served if seq in set(mine)] == mine


def test_two_stores_on_one_file_take_turns_writing(path: Path) -> None:
    with QueueStore.open(path) as first, QueueStore.open(path) as second:
        first.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        start = threading.Barrier(4)

        def send(store: Store) -> None:
            start.wait()
            for n in range(50):
                store.add_message("c", text(str(n)), now=2.0)

        workers = [threading.Thread(target=send, args=(s,)) for s in (first, second) * 2]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert [m.seq for m in second.messages("c")] == list(range(1, 201))


def test_stores_opened_at_once_on_a_new_file_all_open(tmp_path: Path) -> None:
    # SQLite skips its busy handler when a file is switched to WAL, so openers that raced the
    # one converting a new file failed at once with "database is locked" (the soak's start-up).
    paths = [tmp_path / f"new-{n}.sqlite3" for n in range(25)]
    assert open_in_lockstep(lambda path: QueueStore.open(path).close(), paths) == []
    for path in paths:
        with raw(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- the file: migrations, other versions, corruption ----------------------------------------------

# The first schema exactly as version 1 wrote it (migration 1 must never change).
V1_SCHEMA = [
    "PRAGMA application_id = 1094930498",
    "CREATE TABLE conversations (id TEXT PRIMARY KEY, created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL, agent TEXT NOT NULL, cwd TEXT NOT NULL, session_id TEXT,"
    " mcp_servers TEXT NOT NULL DEFAULT '[]', additional_directories TEXT NOT NULL DEFAULT '[]',"
    " config TEXT NOT NULL DEFAULT '{}',"
    " paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)), title TEXT)",
    "CREATE INDEX conversations_by_update ON conversations (updated_at)",
    "CREATE TABLE messages (conversation_id TEXT NOT NULL"
    " REFERENCES conversations (id) ON DELETE CASCADE, seq INTEGER NOT NULL CHECK (seq > 0),"
    " content TEXT NOT NULL, state TEXT NOT NULL CHECK (state IN"
    " ('queued', 'running', 'done', 'cancelled', 'superseded', 'failed')), stop_reason TEXT,"
    " error TEXT, recoverable INTEGER CHECK (recoverable IN (0, 1)), created_at REAL NOT NULL,"
    " started_at REAL, finished_at REAL, PRIMARY KEY (conversation_id, seq))",
    "CREATE INDEX messages_by_state ON messages (conversation_id, state, seq)",
    "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL"
    " REFERENCES conversations (id) ON DELETE CASCADE, ts REAL NOT NULL, seq INTEGER,"
    " kind TEXT NOT NULL, data TEXT NOT NULL,"
    " FOREIGN KEY (conversation_id, seq) REFERENCES messages (conversation_id, seq))",
    "CREATE INDEX events_by_conversation ON events (conversation_id, id)",
    "PRAGMA user_version = 1",
]


def test_a_version_1_store_is_upgraded_and_goes_on_without_replaying_history(path: Path) -> None:
    with raw(path) as conn:
        for statement in V1_SCHEMA:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO conversations (id, created_at, updated_at, agent, cwd)"
            " VALUES ('old', 1, 1, '{}', '/work')"
        )
        rows = [(1, "done", 2.0), (2, "done", 3.0), (3, "running", 4.0), (4, "queued", None)]
        rows += [(5, "queued", None)]
        for seq, state, started in rows:
            conn.execute(
                "INSERT INTO messages (conversation_id, seq, content, state, created_at,"
                " started_at) VALUES ('old', ?, '[]', ?, 1, ?)",
                (seq, state, started),
            )
    with QueueStore.open(path) as store:
        messages = store.messages("old")
        assert [m.position for m in messages] == [1, 2, 3, 4, 5]
        assert [m.attempts for m in messages] == [1, 1, 1, 0, 0]
        assert store.recover_after_crash("old", now=5.0) == [3]
        assert drain(store, "old") == [4, 5]
        store.add_message("old", text("new"), next=True, now=6.0)
        assert drain(store, "old") == [6]
    with raw(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION == 4


def test_migrations_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST_VERSION + 1))


def test_a_new_migration_runs_once_and_a_failing_one_changes_nothing(path: Path) -> None:
    QueueStore.open(path).close()
    added = Migration(LATEST_VERSION + 1, "a column", ("ALTER TABLE messages ADD COLUMN note",))
    broken = Migration(
        LATEST_VERSION + 2, "broken", ("CREATE TABLE t4 (x)", "INSERT INTO missing VALUES (1)")
    )
    with raw(path) as conn:
        assert migrate(conn, str(path), (*MIGRATIONS, added)) == LATEST_VERSION + 1
        assert migrate(conn, str(path), (*MIGRATIONS, added)) == LATEST_VERSION + 1
        with pytest.raises(sqlite3.OperationalError, match="missing"):
            migrate(conn, str(path), (*MIGRATIONS, added, broken))
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION + 1
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "t4" not in tables


def test_a_store_written_by_a_newer_version_is_refused_clearly(path: Path) -> None:
    QueueStore.open(path).close()
    future = Migration(LATEST_VERSION + 1, "future", ("CREATE TABLE future (x)",))
    with raw(path) as conn:
        migrate(conn, str(path), (*MIGRATIONS, future))
    with pytest.raises(QueueStoreError, match="newer acp-bridge") as caught:
        QueueStore.open(path)
    assert str(path) in str(caught.value)
    assert f"version {LATEST_VERSION + 1}" in str(caught.value)


def test_a_corrupt_file_is_refused_naming_it(path: Path) -> None:
    path.write_bytes(b"this is not an sqlite database\x00\xff" * 200)
    with pytest.raises(QueueStoreError, match="not a readable acp-bridge queue store") as caught:
        QueueStore.open(path)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_another_programs_database_is_refused(path: Path) -> None:
    with raw(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    with pytest.raises(QueueStoreError, match="not an acp-bridge queue store"):
        QueueStore.open(path)
    with raw(path) as conn:
        conn.execute("PRAGMA application_id = 42")
    with pytest.raises(QueueStoreError, match="application_id 0x2a"):
        QueueStore.open(path)


def test_a_store_in_a_missing_directory_cannot_be_opened(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "queue.sqlite3"
    with pytest.raises(QueueStoreError, match="cannot open the queue store") as caught:
        QueueStore.open(missing)
    assert str(missing) in str(caught.value)


def test_a_corrupt_record_is_reported_not_returned(store: Store) -> None:
    store.add_message("c", text("a"), now=2.0)
    tamper(store, "UPDATE messages SET content = '{not json' WHERE seq = 1")
    with pytest.raises(QueueStoreError, match="corrupt record"):
        store.next_queued("c")


# -- properties ------------------------------------------------------------------------------------

OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["add", "run", "finish", "requeue", "crash"]),
        st.integers(0, 40),
        st.booleans(),
        st.sampled_from(FINAL),
    ),
    max_size=60,
)
RETRYABLE = {MessageState.CANCELLED, MessageState.SUPERSEDED, MessageState.FAILED}


@settings(max_examples=150, deadline=None, database=None)  # a loaded CI box is no failure
@given(OPERATIONS)
def test_any_interleaving_keeps_the_queue_invariants(
    operations: list[tuple[str, int, bool, MessageState]],
) -> None:
    """A model of the queue (an ordered list of seqs) predicts every answer of the store."""
    queue: list[int] = []  # the expected order of queued messages
    states: dict[int, MessageState] = {}
    attempts: dict[int, int] = {}
    settled: dict[int, StoredMessage] = {}  # final records: they must not change unless retried
    with QueueStore.open(":memory:") as store:
        store.create_conversation("c", agent=AGENT, cwd="/work", now=0.0)
        for step, (operation, index, flag, final) in enumerate(operations, start=1):
            now = float(step)
            seq = index % len(states) + 1 if states else 0
            running = sorted(s for s, state in states.items() if state is MessageState.RUNNING)
            if operation == "add":
                seq = store.add_message("c", text(str(step)), next=flag, now=now).seq
                assert seq == len(states) + 1
                states[seq], attempts[seq] = MessageState.QUEUED, 0
                queue.insert(0 if flag else len(queue), seq)
            elif not seq:
                continue
            elif operation == "run" and states[seq] is MessageState.QUEUED and running:
                with pytest.raises(AlreadyRunningError):
                    store.mark_running("c", seq, now=now)
            elif operation == "run":
                started = store.mark_running("c", seq, now=now)
                assert started == (states[seq] is MessageState.QUEUED)
                if started:
                    states[seq] = MessageState.RUNNING
                    attempts[seq] += 1
                    queue.remove(seq)
            elif operation == "finish":
                outcome: dict[str, Any] = {"stop_reason": "end_turn"}
                if final is MessageState.FAILED:
                    outcome = {"error": FAILURE, "recoverable": flag}
                finished = store.finish("c", seq, final, now=now, **outcome)
                assert finished == (not states[seq].is_final)
                if finished:
                    if states[seq] is MessageState.QUEUED:
                        queue.remove(seq)
                    states[seq] = final
            elif operation == "requeue":
                requeued = store.requeue("c", seq, next=flag, now=now)
                assert requeued == (states[seq] in RETRYABLE)
                if requeued:
                    states[seq] = MessageState.QUEUED
                    del settled[seq]
                    queue.insert(0 if flag else len(queue), seq)
            else:
                assert store.recover_after_crash("c", now=now) == running
                states.update(dict.fromkeys(running, MessageState.FAILED))

            records = store.messages("c")
            assert [r.seq for r in records] == list(range(1, len(states) + 1))
            assert {r.seq: r.state for r in records} == states
            assert {r.seq: r.attempts for r in records} == attempts
            for record in records:
                if record.is_final:
                    assert settled.setdefault(record.seq, record) == record
            assert [r.seq for r in store.queued("c")] == queue
            head = store.next_queued("c")
            assert (head.seq if head else None) == (queue[0] if queue else None)
            if head is not None:
                assert head.position == min(r.position for r in records if r.state == "queued")


def test_a_state_change_and_its_event_are_one_commit(store: Store) -> None:
    store.add_message("c", text("hi"), now=2.0)
    assert store.mark_running("c", 1, now=3.0, event=("turn_started", {"seq": 1}))
    assert store.finish("c", 1, "done", stop_reason="end_turn", now=4.0, event=("turn_ended", {}))
    # A refused change logs nothing.
    assert not store.finish("c", 1, "cancelled", now=5.0, event=("turn_ended", {"again": 1}))
    assert not store.mark_running("c", 1, now=6.0, event=("turn_started", {"again": 1}))
    assert [(e.kind, e.seq, e.data) for e in store.events("c")] == [
        ("turn_started", 1, {"seq": 1}),
        ("turn_ended", 1, {}),
    ]
