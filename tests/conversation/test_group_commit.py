"""Group commit: store calls queued while a batch commits share the next commit, in order, and
one failing call never fails or loses its neighbours. Real SQLite files, real worker threads."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from acp_bridge.conversation.group_commit import GroupCommit
from acp_bridge.conversation.store import QueueStore
from acp_bridge.errors import UnknownConversationError
from tests.conversation.gates import leave_the_event_loop
from tests.conversation.stores import text

pytestmark = pytest.mark.anyio


class Gate:
    """A store call that blocks its worker thread until opened (refused on the loop's thread:
    see gates.py): what is queued meanwhile must wait for the next batch."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def call(self) -> str:
        leave_the_event_loop()
        self.entered.set()
        self.opened.wait(timeout=30)
        return "gate"

    async def wait_entered(self) -> None:
        await anyio.to_thread.run_sync(self.entered.wait, 30)


async def test_calls_queued_during_a_commit_share_the_next_one_in_order(
    store: QueueStore,
) -> None:
    commits = GroupCommit(store)
    gate = Gate()
    seqs: dict[str, int] = {}

    async def send(name: str) -> None:
        seqs[name] = (await commits.call(store.add_message, "c", text(name), now=2.0)).seq

    async with anyio.create_task_group() as tg:
        tg.start_soon(commits.call, gate.call)
        await gate.wait_entered()
        for name in ("a", "b", "c", "d"):
            tg.start_soon(send, name)
            await anyio.wait_all_tasks_blocked()
        gate.opened.set()
    assert commits.batches == 2  # the gate alone, then the four sends together
    assert [seqs[name] for name in "abcd"] == [1, 2, 3, 4]  # submission order
    assert [m.content for m in store.queued("c")] == [text(name) for name in "abcd"]


async def test_callers_queued_during_a_commit_wait_on_one_condition_and_none_is_left(
    store: QueueStore,
) -> None:
    """No swapped Event per call (issue 19): the waiters wake through the group's Condition."""
    commits = GroupCommit(store)
    gate = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(commits.call, gate.call)
        await gate.wait_entered()
        later = [commits.submit(store.add_message, "c", text(name), now=2.0) for name in "ab"]
        for call in later:
            tg.start_soon(call.result)
        await anyio.wait_all_tasks_blocked()
        assert repr(commits.changed) == "<Condition [2 waiting]>"
        assert [repr(call) for call in later] == ["<PendingCommit [queued]>"] * 2
        gate.opened.set()
    assert repr(commits.changed) == "<Condition [0 waiting]>"
    assert [repr(call) for call in later] == ["<PendingCommit [committed]>"] * 2
    assert commits.batches == 2


async def test_a_failing_call_fails_alone_and_its_neighbours_are_committed(
    store: QueueStore,
) -> None:
    commits = GroupCommit(store)
    gate = Gate()
    outcomes: dict[str, Any] = {}

    async def send(conversation: str, name: str) -> None:
        try:
            record = await commits.call(store.add_message, conversation, text(name), now=2.0)
            outcomes[name] = record.seq
        except UnknownConversationError as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(commits.call, gate.call)
        await gate.wait_entered()
        for conversation, name in (("c", "a"), ("nope", "b"), ("c", "c")):
            tg.start_soon(send, conversation, name)
            await anyio.wait_all_tasks_blocked()
        gate.opened.set()
    assert outcomes["a"] == 1 and outcomes["c"] == 2
    assert isinstance(outcomes["b"], UnknownConversationError)
    assert [m.content for m in store.queued("c")] == [text("a"), text("c")]


async def test_a_caller_cancelled_while_its_call_commits_still_gets_its_outcome(
    store: QueueStore,
) -> None:
    """As with to_thread: a send cancelled from outside must not commit a message whose seq
    its caller never heard of."""
    commits = GroupCommit(store)
    gate = Gate()
    seen: list[int] = []

    async def send() -> None:
        record = await commits.call(store.add_message, "c", text("x"), now=2.0)
        seen.append(record.seq)

    async with anyio.create_task_group() as tg:
        tg.start_soon(commits.call, gate.call)
        await gate.wait_entered()
        tg.start_soon(send)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()  # every task, the waiting send included
        gate.opened.set()
    assert seen == [1]
    assert [m.seq for m in store.queued("c")] == [1]


async def test_a_call_alone_is_committed_at_once_by_its_own_caller(store: QueueStore) -> None:
    commits = GroupCommit(store)
    record = await commits.call(store.add_message, "c", text("x"), now=2.0)
    assert record.seq == 1 and commits.batches == 1
    assert store.get_message("c", 1) is not None


def test_a_batch_is_one_transaction_rolled_back_whole_on_error(store: QueueStore) -> None:
    with pytest.raises(RuntimeError), store.batch():
        store.add_message("c", text("a"), now=2.0)
        raise RuntimeError("boom")
    assert store.queued("c") == []
    with store.batch():
        store.add_message("c", text("a"), now=2.0)
        store.add_message("c", text("b"), now=2.0)
    assert [m.seq for m in store.queued("c")] == [1, 2]
