"""Leaving a conversation while a turn runs records the turn's final state before anything is
cancelled: the store says ``cancelled`` (never ``running``, which a later resume would take for
a crash of the bridge) and subscribers get ``turn_ended``.

Before the fix, ``open_conversation`` cancelled the task group running the turn before closing
the conversation: every test here found the message still ``running`` and no ``turn_ended``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.store import QueueStore
from acp_bridge.core.turn_machine import TurnTimings
from acp_bridge.errors import ResourceClosedError
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from tests.conversation.gates import leave_the_event_loop

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
GRACE_S = 0.5
OPTIONS = ClientOptions(
    restart=RestartPolicy(initial_delay_s=0.01, max_delay_s=0.05),
    shutdown=ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5),
    cancel_grace_s=GRACE_S,
)
POLICY = TurnPolicy(timings=TurnTimings(cancel_grace_s=GRACE_S))

Body = Callable[[Conversation], Awaitable[None]]


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), *flags], name=script[:-3])


@asynccontextmanager
async def collecting(
    tmp_path: Path, spec: AgentSpec
) -> AsyncIterator[tuple[Conversation, list[dict[str, Any]], anyio.Event]]:
    """A conversation whose events are collected by a task that outlives it: it reads until
    the conversation closes its stream, so events published while closing are seen too."""
    seen: list[dict[str, Any]] = []
    first_update = anyio.Event()
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    try:
        async with (
            open_supervised_agent(spec, OPTIONS) as agent,
            anyio.create_task_group() as tg,
            open_conversation(store, agent, record, policy=POLICY) as conv,
        ):
            events = conv.subscribe(replay=True)

            async def collect() -> None:
                with events:
                    async for event in events:
                        seen.append(event)
                        if event["event"] == "update":
                            first_update.set()

            tg.start_soon(collect)
            yield conv, seen, first_update
    finally:
        store.close()


def stored_states(tmp_path: Path) -> dict[int, str]:
    with QueueStore.open(tmp_path / "q.db") as store:
        record = store.latest_conversation()
        assert record is not None
        return {m.seq: m.state.value for m in store.messages(record.id)}


def turn_ended(seen: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    return [(e["seq"], e["state"], e["stopReason"]) for e in seen if e["event"] == "turn_ended"]


async def stop_then_leave(conv: Conversation) -> None:
    await conv.stop()


async def just_leave(conv: Conversation) -> None:
    pass


@pytest.mark.parametrize("body", [stop_then_leave, just_leave], ids=["stop", "close"])
@pytest.mark.parametrize(
    "script", ["slow_agent.py", "stubborn_agent.py"], ids=["cooperative", "stubborn"]
)
async def test_leaving_while_a_turn_runs_records_it_cancelled(
    tmp_path: Path, script: str, body: Body, caplog: pytest.LogCaptureFixture
) -> None:
    """A cooperative agent answers the cancel; a stubborn one never does, so the turn closes
    at the grace window and the agent is quarantined. Either way the turn is recorded, by its
    own close: leaving waits for it (within the stop bound), it is never cut short."""
    program = "echo working; wait" if script == "slow_agent.py" else "echo working; hang"
    with anyio.fail_after(30):
        async with collecting(tmp_path, fake(script)) as (conv, seen, first_update):
            await conv.send(program)
            await first_update.wait()
            await body(conv)
    assert stored_states(tmp_path) == {1: "cancelled"}
    assert turn_ended(seen) == [(1, "cancelled", "cancelled")]
    cut = [r.getMessage() for r in caplog.records if "did not close in time" in r.getMessage()]
    assert cut == []


async def test_a_conversation_cancelled_from_outside_still_records_its_turn(
    tmp_path: Path,
) -> None:
    """The caller's scope is cancelled (a timeout, a signal): the turn is shielded from it
    until it is recorded, within the stop bound. The reader lives outside that scope."""
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    seen: list[dict[str, Any]] = []
    try:
        with anyio.fail_after(30):
            async with (
                open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent,
                anyio.create_task_group() as readers,
            ):
                with anyio.CancelScope() as outer:
                    async with open_conversation(store, agent, record, policy=POLICY) as conv:
                        events = conv.subscribe()
                        got_update = anyio.Event()

                        async def collect() -> None:
                            with events:
                                async for event in events:
                                    seen.append(event)
                                    got_update.set()

                        readers.start_soon(collect)
                        await conv.send("echo working; wait")
                        while not any(e["event"] == "update" for e in seen):
                            await got_update.wait()
                            got_update = anyio.Event()
                        outer.cancel()
                        await anyio.sleep_forever()
    finally:
        store.close()
    assert stored_states(tmp_path) == {1: "cancelled"}
    assert turn_ended(seen) == [(1, "cancelled", "cancelled")]


async def test_stop_now_cuts_the_wait_and_still_records_the_turn_cancelled(
    tmp_path: Path,
) -> None:
    """A stop *now* (the CLI's second signal: kill the agent's tree, then stop_now) does not
    wait out the grace window of a stubborn agent; the turn is still recorded cancelled."""
    slow_grace = TurnPolicy(timings=TurnTimings(cancel_grace_s=60))
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    seen: list[dict[str, Any]] = []
    try:
        with anyio.fail_after(20):  # far below the 60 s grace window
            async with (
                open_supervised_agent(fake("stubborn_agent.py"), OPTIONS) as agent,
                anyio.create_task_group() as tg,
                open_conversation(store, agent, record, policy=slow_grace) as conv,
            ):
                events = conv.subscribe()
                got_update = anyio.Event()

                async def collect() -> None:
                    with events:
                        async for event in events:
                            seen.append(event)
                            if event["event"] == "update":
                                got_update.set()

                tg.start_soon(collect)
                await conv.send("echo working; hang")
                await got_update.wait()
                await conv.stop()
                agent.kill_now()
                conv.stop_now()
    finally:
        store.close()
    assert stored_states(tmp_path) == {1: "cancelled"}
    assert turn_ended(seen) == [(1, "cancelled", "cancelled")]


class GatedSends(QueueStore):
    """A store whose next add_message blocks in its worker thread until released (refused on
    the loop's thread: see gates.py): the window between a send's commit and its step in the
    queue machine, held open."""

    gate: threading.Event | None = None
    entered: threading.Event | None = None

    def add_message(self, *args: Any, **kwargs: Any) -> Any:
        gate, entered = self.gate, self.entered
        if gate is not None and entered is not None:
            leave_the_event_loop()
        record = super().add_message(*args, **kwargs)
        if gate is not None and entered is not None:
            entered.set()
            gate.wait(timeout=30)
        return record


async def test_a_stop_while_a_send_commits_comes_after_it_and_store_and_queue_agree(
    tmp_path: Path,
) -> None:
    """A send's commit and its queue step are one step of the conversation: a stop asked for
    while the commit is held open waits for the step, then pauses. The message never runs
    (its start is withdrawn: it stays queued, issue 21), and the store says paused and
    queued, as the queue does."""
    store = GatedSends.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    try:
        async with (
            open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent,
            open_conversation(store, agent, record, policy=POLICY) as conv,
        ):
            store.gate, store.entered = threading.Event(), threading.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(conv.send, "echo one; wait")
                await anyio.to_thread.run_sync(store.entered.wait, 30)
                tg.start_soon(conv.stop)  # asked while the send's commit is held open
                await anyio.wait_all_tasks_blocked()
                store.gate.set()
            store.gate = None
            with anyio.fail_after(20):
                assert await conv.wait_idle() == "paused"
            assert [m.state.value for m in conv.messages()] == ["queued"]
        assert store.get_conversation(record.id).paused  # type: ignore[union-attr]
        assert [m.state.value for m in store.messages(record.id)] == ["queued"]
    finally:
        store.close()


class GatedStart(QueueStore):
    """A store whose commit of message 2's start blocks in its worker thread until released
    (refused on the loop's thread: see gates.py):
    a stop can then be made to wait for the conversation while it is starting message 2."""

    gate: threading.Event | None = None
    entered: threading.Event | None = None

    def mark_running(self, conversation_id: str, seq: int, **kwargs: Any) -> bool:
        gate, entered = self.gate, self.entered
        if seq == 2 and gate is not None and entered is not None:
            leave_the_event_loop()
        started = super().mark_running(conversation_id, seq, **kwargs)
        if seq == 2 and gate is not None and entered is not None:
            entered.set()
            gate.wait(timeout=30)
        return started


async def test_a_close_right_after_the_next_turn_was_started_cancels_that_turn(
    tmp_path: Path,
) -> None:
    """When a turn ends and the next message starts at once (its final state and the next
    start in one commit), a close that waited meanwhile (it cancels without a commit of its
    own first) runs between that start and the new turn's first step. Before the fix the
    driver forgot that cancel when its run began (on trio one time in two: the close and the
    new turn's task wake in the same batch), and the second turn, which waits for a cancel,
    never ended (shutdown would wait out its whole bound). Repeated, so both wake-up orders
    are met."""
    for attempt in range(8):
        store = GatedStart.open(tmp_path / f"q{attempt}.db")
        store.gate, store.entered = threading.Event(), threading.Event()
        record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
        try:
            async with (
                open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent,
                open_conversation(store, agent, record, policy=POLICY) as conv,
                anyio.create_task_group() as tg,
            ):
                await conv.send("echo one")
                await conv.send("echo two; wait")
                await anyio.to_thread.run_sync(store.entered.wait, 30)
                tg.start_soon(conv.close)  # waits for the step that is starting message 2
                await anyio.wait_all_tasks_blocked()
                store.gate.set()
                with anyio.fail_after(20):
                    assert await conv.wait_idle() == "closed"
                states = [m.state.value for m in conv.messages()]
                assert states == ["done", "cancelled"], (attempt, states)
        finally:
            store.close()


async def test_a_send_cancelled_after_its_commit_still_queues_its_message(tmp_path: Path) -> None:
    """A send commits its message, then takes its step in the queue. A caller cancelled while
    the commit runs (held open here) must not leave the message committed ``queued`` but
    unknown to the running queue: it is queued and prompted all the same."""
    store = GatedSends.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    try:
        async with (
            open_supervised_agent(fake("echo_agent.py"), OPTIONS) as agent,
            open_conversation(store, agent, record, policy=POLICY) as conv,
        ):
            store.gate, store.entered = threading.Event(), threading.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(conv.send, "echo one")
                await anyio.to_thread.run_sync(store.entered.wait, 30)
                tg.cancel_scope.cancel()  # the sending task is cancelled mid-commit
                store.gate.set()
            store.gate = None
            with anyio.fail_after(20):
                assert await conv.wait_idle() == "drained"
            assert [(m.seq, m.state.value) for m in conv.messages()] == [(1, "done")]
        assert [m.state.value for m in store.messages(record.id)] == ["done"]
    finally:
        store.close()


async def test_a_retry_after_a_stop_unpauses_the_store_as_a_send_does(tmp_path: Path) -> None:
    """A retry resumes a stopped queue (the queue machine un-pauses). Before, the store kept
    its paused flag, so the next open of the conversation came back paused."""
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    try:
        async with (
            open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent,
            open_conversation(store, agent, record, policy=POLICY) as conv,
        ):
            events = conv.subscribe()
            await conv.send("echo one; wait")
            with events, anyio.fail_after(20):
                async for event in events:  # the turn runs (a start not yet made would
                    if event["event"] == "update":  # stay queued: issue 21)
                        break
            await conv.stop()  # the turn ends cancelled, the queue pauses
            with anyio.fail_after(20):
                assert await conv.wait_idle() == "paused"
            assert store.get_conversation(record.id).paused  # type: ignore[union-attr]
            await conv.retry(1)
            assert not store.get_conversation(record.id).paused  # type: ignore[union-attr]
            await conv.stop()  # the retried turn waits for a cancel too
            with anyio.fail_after(20):
                assert await conv.wait_idle() == "paused"
    finally:
        store.close()


async def test_a_send_after_close_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    try:
        async with (
            open_supervised_agent(fake("echo_agent.py"), OPTIONS) as agent,
            open_conversation(store, agent, record, policy=POLICY) as conv,
        ):
            await conv.close()
            with pytest.raises(ResourceClosedError):
                await conv.send("echo late")
        assert store.messages(record.id) == []
    finally:
        store.close()
