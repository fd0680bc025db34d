"""One clock (issue 19): a conversation reads the clock it is given, and no other. Opening it
(the session recorded, a crash recovered), the queue's commits, the events' ``ts`` and a turn's
``duration_ms`` all come from the injected clock."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.store import QueueStore
from acp_bridge.process.spec import AgentSpec

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
BASE_S = 5_000_000.0  # 1970-02-27: no real clock reads anything near it today
STEP_S = 1000.0


class SteppingClock:
    """Epoch seconds from :data:`BASE_S`, a whole :data:`STEP_S` later at every read, so a time
    taken from any other clock (``time.time``, ``time.monotonic``, the event loop's) stands out,
    and so does a duration measured with one."""

    def __init__(self) -> None:
        self.reads: list[float] = []

    def __call__(self) -> float:
        now = BASE_S + STEP_S * len(self.reads)
        self.reads.append(now)
        return now


async def test_opening_the_queue_and_the_turns_read_the_injected_clock(tmp_path: Path) -> None:
    spec = AgentSpec([sys.executable, "-u", str(AGENTS / "echo_agent.py"), "--quiet"])
    clock = SteppingClock()
    store = QueueStore.open(tmp_path / "q.db")
    try:
        record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
        # A message a dead bridge left running: opening recovers it (failed, recoverable).
        store.add_message(record.id, [{"type": "text", "text": "cut"}], now=2.0)
        assert store.mark_running(record.id, 1, now=3.0)
        live: list[dict[str, Any]] = []
        async with (
            open_supervised_agent(spec, ClientOptions()) as agent,
            open_conversation(store, agent, record, clock=clock) as conv,
        ):
            with conv.subscribe() as events, anyio.fail_after(20):
                assert await conv.send("hello") == 2
                assert await conv.wait_idle() == "drained"
                async for event in events:
                    live.append(event)
                    if event["event"] == "turn_ended":
                        break
        conversation = store.get_conversation(record.id)
        messages = store.messages(record.id)
        log = store.events(record.id)
    finally:
        store.close()

    reads = set(clock.reads)
    recovered, sent = messages
    assert recovered.state == "failed" and recovered.finished_at in reads
    assert {sent.created_at, sent.started_at, sent.finished_at} <= reads
    assert conversation is not None and conversation.updated_at in reads
    assert log and all(entry.ts in reads for entry in log)
    assert live and all(event["ts"] in reads for event in live)
    ended = live[-1]
    assert ended["seq"] == 2
    # Two reads of the clock apart, at least one step: not the microseconds the echo took.
    whole_steps = ended["duration_ms"] / (STEP_S * 1000)
    assert whole_steps >= 1 and whole_steps == int(whole_steps)
