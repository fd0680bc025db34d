"""Commits that never wait for a checkpoint or a worker thread: the queue store's background
WAL checkpoints (acp_bridge.sqlite_wal.WalCheckpointer) and its commit on the caller's thread
(QueueStore.commit_now_if_free). Real SQLite files, real threads."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest

from acp_bridge.conversation.group_commit import GroupCommit
from acp_bridge.conversation.store import QueueStore
from acp_bridge.errors import QueueStoreError
from acp_bridge.sqlite_wal import WalCheckpointer
from tests.conversation.stores import AGENT, checkpointer_of, sqlite_of, text


def messages_in_the_main_file(path: Path) -> int:
    """Messages that reached the database file itself, not only its WAL (``immutable``: SQLite
    then reads the main file alone)."""
    conn = sqlite3.connect(f"file:{quote(str(path))}?immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    except sqlite3.OperationalError:  # not even the table's pages reached it
        return 0
    finally:
        conn.close()


def add(store: QueueStore, count: int) -> None:
    for n in range(count):
        store.add_message("c", text(str(n)), now=2.0)


def test_commits_leave_checkpoints_to_the_background_thread(
    store: QueueStore, path: Path
) -> None:
    checkpointer = checkpointer_of(store)
    assert sqlite_of(store).execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    done = checkpointer.checkpoints
    add(store, checkpointer._every)  # the first checkpoint's worth
    assert checkpointer.wait_for(done + 1, timeout=30)
    assert messages_in_the_main_file(path) >= 1


def test_the_thread_finds_its_file_after_a_chdir_and_with_uri_characters_in_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread opens the file later: by its absolute path, quoted for a URI, read-write only
    (it never creates an empty database somewhere else)."""
    folder = tmp_path / "a b?c#d%e"
    folder.mkdir()
    monkeypatch.chdir(folder)
    with QueueStore.open("queue.sqlite3") as store:
        store.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        monkeypatch.chdir(tmp_path)
        add(store, checkpointer_of(store)._every)
        assert checkpointer_of(store).wait_for(1, timeout=30)
    assert messages_in_the_main_file(folder / "queue.sqlite3") >= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a b?c#d%e"]  # nothing created here


def test_without_the_background_thread_no_commit_checkpoints(path: Path) -> None:
    with QueueStore.open(path) as store:
        store._connection._checkpointer = WalCheckpointer(str(path), every=10**9)  # never wakes
        store.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        add(store, 300)  # several thousand WAL pages' worth of commits
        assert messages_in_the_main_file(path) == 0
    assert messages_in_the_main_file(path) == 300  # the last close checkpoints it all


def test_the_commit_that_starts_the_wal_over_is_not_made_on_the_callers_thread(
    store: QueueStore,
) -> None:
    """After a checkpoint that copied the whole WAL back, the next writing transaction starts
    the WAL over, and SQLite fsyncs the new WAL header in that commit (strace showed the
    fdatasync on the event loop's thread). So the store declines to make that commit on the
    caller's thread until a commit that may wait has made the restart."""
    checkpointer = checkpointer_of(store)
    add(store, checkpointer._every - 1)  # with the conversation's: one checkpoint's worth
    assert checkpointer.wait_for(1, timeout=30)
    assert checkpointer.restarts_due == 1  # nothing was reading: everything was copied
    assert not store.commit_now_if_free(lambda: add_one(store, "would fsync"))
    add_one(store, "pays the restart")  # the way a worker thread commits
    assert store.commit_now_if_free(lambda: add_one(store, "on the loop again"))
    assert [m.content for m in store.queued("c")][-2:] == [
        text("pays the restart"),
        text("on the loop again"),
    ]


def test_a_checkpointer_that_cannot_keep_up_hands_checkpoints_back(tmp_path: Path) -> None:
    """The WAL's bound: with no checkpoint done for 16 x ``every`` commits, ``committed`` says
    so, once (the store then turns SQLite's own checkpoints back on)."""
    checkpointer = WalCheckpointer(str(tmp_path / "no-such-dir" / "q.db"), every=2)
    try:
        answers = [checkpointer.committed() for _ in range(40)]
    finally:
        checkpointer.close()
    assert answers.index(True) == 31 and answers.count(True) == 1
    assert checkpointer.checkpoints == 0


def test_the_store_turns_sqlite_checkpoints_back_on_at_the_bound(path: Path) -> None:
    with QueueStore.open(path) as store:
        missing = str(path.parent / "missing" / "x.db")
        store._connection._checkpointer = WalCheckpointer(missing, every=1)
        store.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        add(store, 16)
        assert sqlite_of(store).execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        # A commit may now checkpoint and fsync: no longer on the caller's (an event loop's)
        # thread.
        assert not store.commit_now_if_free(lambda: add_one(store, "late"))


def test_closing_the_store_stops_its_checkpoint_thread(path: Path) -> None:
    store = QueueStore.open(path)
    store.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
    add(store, 70)
    thread = checkpointer_of(store)._thread
    assert thread is not None
    store.close()
    assert not thread.is_alive()


def test_an_in_memory_store_has_no_checkpoint_thread() -> None:
    with QueueStore.open(":memory:") as store:
        assert store._connection._checkpointer is None


# -- commit_now_if_free ------------------------------------------------------------------------


def add_one(store: QueueStore, name: str) -> bool:
    store.add_message("c", text(name), now=2.0)
    return True


def test_a_free_store_commits_on_the_callers_thread(store: QueueStore) -> None:
    assert store.commit_now_if_free(lambda: add_one(store, "a") and add_one(store, "b"))
    assert [m.content for m in store.queued("c")] == [text("a"), text("b")]


def test_another_writer_makes_it_decline_at_once_and_keep_nothing(
    store: QueueStore, path: Path
) -> None:
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process, writing
        assert not store.commit_now_if_free(lambda: add_one(store, "a"))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.queued("c") == []
    assert sqlite_of(store).execute("PRAGMA busy_timeout").fetchone()[0] == 10_000  # restored


def test_a_store_busy_in_another_thread_makes_it_decline(store: QueueStore) -> None:
    with store._connection._lock:  # the worker thread's transaction, say
        assert not store.commit_now_if_free(lambda: add_one(store, "a"))
    assert store.queued("c") == []


def test_a_store_that_fsyncs_every_commit_always_declines(path: Path) -> None:
    with QueueStore.open(path, durability="power") as store:
        store.create_conversation("c", agent=AGENT, cwd="/work", now=1.0)
        assert not store.commit_now_if_free(lambda: add_one(store, "a"))
        assert store.queued("c") == []


def test_a_closed_store_declines_and_leaves_the_error_to_the_slow_way(path: Path) -> None:
    store = QueueStore.open(path)
    store.close()
    assert not store.commit_now_if_free(lambda: True)


def test_work_that_fails_keeps_nothing_and_leaves_the_store_usable(store: QueueStore) -> None:
    assert not store.commit_now_if_free(lambda: add_one(store, "a") and False)

    def fails() -> bool:
        add_one(store, "b")
        store.add_message("no-such-conversation", text("c"), now=2.0)
        return True

    with pytest.raises(QueueStoreError):  # not an sqlite3.Error: the caller's to handle
        store.commit_now_if_free(fails)
    assert store.queued("c") == []
    add_one(store, "d")
    assert [m.content for m in store.queued("c")] == [text("d")]


# -- the group commit's two ways -----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_group_commit_runs_on_the_loop_thread_when_the_store_is_free(
    store: QueueStore,
) -> None:
    commits = GroupCommit(store)
    threads: list[int] = []

    def where() -> int:
        threads.append(threading.get_ident())
        return store.add_message("c", text("x"), now=2.0).seq

    assert await commits.call(where) == 1
    assert threads == [threading.get_ident()]


@pytest.mark.anyio
async def test_a_group_commit_waits_for_another_writer_in_a_worker_thread(
    store: QueueStore, path: Path
) -> None:
    """The loop is never blocked by another process's write: the call declines on the loop's
    thread, waits in a worker thread (the busy timeout), and commits once the writer is done;
    calls arriving meanwhile form the next batch."""
    commits = GroupCommit(store)
    seqs: dict[str, int] = {}

    async def send(name: str) -> None:
        seqs[name] = (await commits.call(store.add_message, "c", text(name), now=2.0)).seq

    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "a")
            await anyio.wait_all_tasks_blocked()
            assert commits.committing  # in a worker thread, waiting for the writer
            for name in ("b", "c"):  # one after the other: submitted in this order
                tg.start_soon(send, name)
                await anyio.wait_all_tasks_blocked()
            other.execute("COMMIT")
    finally:
        other.close()
    assert seqs == {"a": 1, "b": 2, "c": 3}  # submission order
    assert commits.batches == 2  # "a" alone, then "b" and "c" together
