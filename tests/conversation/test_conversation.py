"""The conversation layer against real agents: FIFO, interrupt, stop, crashes, bridge crashes."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
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
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
OPTIONS = ClientOptions(
    restart=RestartPolicy(initial_delay_s=0.01, max_delay_s=0.05),
    shutdown=ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5),
    cancel_grace_s=0.5,
)
POLICY = TurnPolicy(timings=TurnTimings(cancel_grace_s=0.5))


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), *flags], name=script[:-3])


class Seen(list[dict[str, Any]]):
    """The events so far; ``wait_for`` wakes on each new one (no polling)."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = anyio.Event()

    def add(self, event: dict[str, Any]) -> None:
        self.append(event)
        self.changed.set()
        self.changed = anyio.Event()


@asynccontextmanager
async def conversation(
    tmp_path: Path, spec: AgentSpec, options: ClientOptions = OPTIONS, store_name: str = "q.db"
) -> AsyncIterator[tuple[Conversation, QueueStore, Seen]]:
    store = QueueStore.open(tmp_path / store_name)
    record = store.latest_conversation() or store.create_conversation(
        agent={"argv": list(spec.argv)}, cwd=str(tmp_path), now=1.0
    )
    seen = Seen()
    try:
        async with (
            open_supervised_agent(spec, options) as agent,
            open_conversation(store, agent, record, policy=POLICY) as conv,
        ):
            events = conv.subscribe(replay=True)
            async with anyio.create_task_group() as tg:

                async def collect() -> None:
                    with events:
                        async for event in events:
                            seen.add(event)

                tg.start_soon(collect)
                yield conv, store, seen
                tg.cancel_scope.cancel()
    finally:
        store.close()


def finals(store: QueueStore) -> dict[int, str]:
    conv = store.latest_conversation()
    assert conv is not None
    return {m.seq: m.state for m in store.messages(conv.id)}


def started(seen: list[dict[str, Any]]) -> list[int]:
    return [e["seq"] for e in seen if e["event"] == "turn_started"]


async def idle(conv: Conversation) -> str:
    with anyio.fail_after(20):
        return await conv.wait_idle()


async def until(seen: Seen, kind: str, count: int = 1) -> None:
    with anyio.fail_after(20):
        while sum(e["event"] == kind for e in seen) < count:
            await seen.changed.wait()


async def test_queued_messages_go_out_in_order_one_turn_each(tmp_path: Path) -> None:
    async with conversation(tmp_path, fake("echo_agent.py")) as (conv, store, seen):
        for word in ("one", "two", "three", "four"):
            await conv.send(f"echo {word}")
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "done", 2: "done", 3: "done", 4: "done"}
    assert started(seen) == [1, 2, 3, 4]
    assert [e["event"] for e in seen][:2] == ["agent_started", "session"]


async def test_a_message_sent_during_a_turn_waits_for_it(tmp_path: Path) -> None:
    async with conversation(tmp_path, fake("echo_agent.py")) as (conv, _store, seen):
        await conv.send("trickle 5 30")
        await until(seen, "update")
        await conv.send("echo second")
        assert await idle(conv) == "drained"
    ended = [e["seq"] for e in seen if e["event"] == "turn_ended"]
    assert ended == [1, 2]
    first_end = next(i for i, e in enumerate(seen) if e["event"] == "turn_ended")
    second_start = [i for i, e in enumerate(seen) if e["event"] == "turn_started"][1]
    assert first_end < second_start


async def test_an_interrupt_supersedes_the_running_turn_and_goes_next(tmp_path: Path) -> None:
    async with conversation(tmp_path, fake("slow_agent.py")) as (conv, store, seen):
        await conv.send("echo first; wait")
        await conv.send("echo queued")
        await until(seen, "update")
        await conv.send("echo urgent", interrupt=True)
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "superseded", 2: "done", 3: "done"}
    assert started(seen) == [1, 3, 2]


async def test_stop_cancels_and_pauses_until_resume(tmp_path: Path) -> None:
    async with conversation(tmp_path, fake("slow_agent.py")) as (conv, store, seen):
        await conv.send("echo first; wait 0.5")  # cancelled at once; a retry ends by itself
        await conv.send("echo later")
        await until(seen, "update")
        await conv.stop()
        assert await idle(conv) == "paused"
        assert finals(store) == {1: "cancelled", 2: "queued"}
        await conv.resume()
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "cancelled", 2: "done"}
        await conv.retry(1)
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "done", 2: "done"}
    assert started(seen) == [1, 2, 1]


async def test_a_crash_mid_turn_fails_the_message_recoverably_and_the_queue_goes_on(
    tmp_path: Path,
) -> None:
    async with conversation(tmp_path, fake("echo_agent.py")) as (conv, store, seen):
        await conv.send("echo doomed; crash 3")
        await conv.send("echo next")
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "failed", 2: "done"}
    failed = next(e for e in seen if e["event"] == "turn_failed")
    assert failed["seq"] == 1 and failed["recoverable"] is True
    assert started(seen) == [1, 2]  # never re-sent by itself


async def test_when_the_agent_is_gone_the_loop_stops_and_a_send_revives_it(
    tmp_path: Path,
) -> None:
    no_restart = ClientOptions(
        restart=RestartPolicy(max_restarts=0), shutdown=OPTIONS.shutdown, cancel_grace_s=0.5
    )
    spec = fake("echo_agent.py", "--history", str(tmp_path / "h.json"))
    async with conversation(tmp_path, spec, no_restart) as (conv, store, _seen):
        await conv.send("echo x; crash 3")
        assert await idle(conv) == "agent_gone"
        await conv.send("echo back")
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "failed", 2: "done"}


async def test_a_message_running_when_the_bridge_died_fails_and_the_queue_goes_on(
    tmp_path: Path,
) -> None:
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    for text in ("echo one", "echo two", "echo three"):
        store.add_message(record.id, [{"type": "text", "text": text}], now=2.0)
    store.mark_running(record.id, 1, now=3.0)
    store.finish(record.id, 1, "done", stop_reason="end_turn", now=4.0)
    store.mark_running(record.id, 2, now=5.0)  # the bridge died here
    store.close()
    async with conversation(tmp_path, fake("echo_agent.py")) as (conv, store, seen):
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "done", 2: "failed", 3: "done"}
    assert started(seen) == [3]  # nothing prompted twice, history not replayed
    failed = next(e for e in seen if e["event"] == "turn_failed")
    assert failed["seq"] == 2 and failed["recoverable"] is True


async def test_a_message_committed_elsewhere_before_a_local_send_goes_first(
    tmp_path: Path,
) -> None:
    """Issue 23: another host committed message 2 (a shared store numbers a conversation's
    messages in commit order) and its notification has not arrived when this owner commits
    message 3: 2 is queued first, never left behind for the next owner."""
    async with conversation(tmp_path, fake("echo_agent.py")) as (conv, store, seen):
        await conv.send("echo one")
        assert await idle(conv) == "drained"
        elsewhere = QueueStore.open(tmp_path / "q.db")
        try:
            elsewhere.add_message(conv.id, [{"type": "text", "text": "echo two"}], now=2.0)
        finally:
            elsewhere.close()
        assert await conv.send("echo three") == 3
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "done", 2: "done", 3: "done"}
        assert await conv.take_sent_elsewhere() == []  # its notification, late: nothing new
    assert started(seen) == [1, 2, 3]


async def test_a_steer_committed_after_a_message_from_elsewhere_falls_back_behind_it(
    tmp_path: Path,
) -> None:
    async with conversation(tmp_path, fake("echo_agent.py")) as (conv, store, seen):
        await conv.send("echo one")
        assert await idle(conv) == "drained"
        elsewhere = QueueStore.open(tmp_path / "q.db")
        try:
            elsewhere.add_message(conv.id, [{"type": "text", "text": "echo two"}], now=2.0)
        finally:
            elsewhere.close()
        assert await conv.send("echo three", steer=True) == 3
        assert await idle(conv) == "drained"
        assert finals(store) == {1: "done", 2: "done", 3: "done"}
    assert started(seen) == [1, 2, 3]
    fallback = next(e for e in seen if e["event"] == "steer_fallback")
    assert fallback["seq"] == 3


async def test_a_stop_during_an_automatic_restart_wins(tmp_path: Path) -> None:
    slow_restart = ClientOptions(
        restart=RestartPolicy(first_delay_s=0.3, initial_delay_s=0.3, max_delay_s=1),
        shutdown=OPTIONS.shutdown,
        cancel_grace_s=0.5,
    )
    spec = fake("echo_agent.py", "--history", str(tmp_path / "h.json"))
    async with conversation(tmp_path, spec, slow_restart) as (conv, store, seen):
        await conv.send("echo x; crash 3")
        await conv.send("echo must wait")
        await until(seen, "agent_restarted")  # the restart is pending: stop now
        await conv.stop()
        assert await idle(conv) == "paused"
        await until(seen, "session_restored")
        # Message 2 was the turn being started (waiting for the restart): the stop withdrew
        # it before it was ever prompted, and it stays queued for a resume (issue 21).
        assert finals(store) == {1: "failed", 2: "queued"}
    assert started(seen) == [1]
    failed = next(e for e in seen if e["event"] == "turn_failed")
    assert failed["error"]["agent"] == "echo_agent"
    assert failed["error"]["sessionId"]
    assert failed["error"]["recoverable"] is True


async def test_several_conversations_run_at_once_in_one_process(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with (
        conversation(tmp_path / "a", fake("echo_agent.py")) as (first, first_store, _),
        conversation(tmp_path / "b", fake("echo_agent.py")) as (second, second_store, _),
    ):
        for n in range(5):
            await first.send(f"echo a{n}")
            await second.send(f"echo b{n}")
        assert await idle(first) == await idle(second) == "drained"
        assert set(finals(first_store).values()) == set(finals(second_store).values()) == {"done"}


async def test_chosen_config_is_stored_and_applied_when_the_conversation_resumes(
    tmp_path: Path,
) -> None:
    spec = fake("echo_agent.py", "--settings", "--history", str(tmp_path / "h.json"))
    async with conversation(tmp_path, spec) as (conv, store, seen):
        await conv.set_config_option("model", "large")
        await conv.set_mode("code")
        record = store.latest_conversation()
        assert record is not None
        assert record.config == {"options": {"model": "large"}, "mode": "code"}
    # A new bridge process, a new agent process: the choice comes back from the store.
    async with conversation(tmp_path, spec) as (conv, store, seen):
        await conv.send("settings")
        assert await idle(conv) == "drained"
    texts = [
        e["update"]["content"]["text"]
        for e in seen
        if e["event"] == "update" and e["update"].get("sessionUpdate") == "agent_message_chunk"
    ]
    assert texts == ["settings mode=code model=large"]


async def test_a_message_stopped_before_its_turn_began_stays_queued_with_no_turn_event(
    tmp_path: Path,
) -> None:
    # Message 2's start waits for the agent's restart when the stop comes: it was never
    # prompted, so it stays queued for a resume (issue 21: it was recorded cancelled, with a
    # turn_ended event, though no turn ran), and its prompt is kept for that resume.
    slow_restart = ClientOptions(
        restart=RestartPolicy(initial_delay_s=30, max_delay_s=30),
        shutdown=OPTIONS.shutdown,
        cancel_grace_s=0.5,
    )
    async with conversation(tmp_path, fake("echo_agent.py"), slow_restart) as (conv, store, seen):
        await conv.send("echo doomed; crash 3")
        await conv.send("echo never")
        while not any(e["event"] == "turn_failed" for e in seen):
            await seen.changed.wait()
        await conv.stop()
        assert await idle(conv) == "paused"
        assert finals(store) == {1: "failed", 2: "queued"}
        assert set(conv._turns.prompts) <= {2}  # nothing kept but the queued message's
    assert not [e for e in seen if e["event"].startswith("turn_") and e["seq"] == 2]
    assert started(seen) == [1]
