"""A flood of updates through a conversation with a slow subscriber: memory stays flat, and the
primary subscriber loses nothing (backpressure, not buffering).

Before the fix every subscriber queue was unbounded (``math.inf``): a reader that fell behind
let the whole flood pile up in memory (1,000,000 updates took the bridge to 1.1 GB). Here the
reader reads nothing until the bridge has read enough updates to fill the primary's queue and
the turn's buffer (where backpressure stops the bridge's reader), then reads; the test
process's RSS must stay within :data:`RSS_TOLERANCE`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.conversation.fanout import SUBSCRIBER_BUFFER
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.store import QueueStore
from acp_bridge.process.spec import AgentSpec

# The hang guards below (fail_after) must fire before pytest-timeout: interrupted by its
# SIGALRM inside asyncio's select, the event loop could not finish the test's tasks and the
# xdist worker hung for good (seen under load: the whole -n auto run stopped at 91%).
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]  # guards: 60 + 120 s

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
FLOOD = 50_000
"""Queued whole, this many update events take well over 100 MB of Python objects."""
RSS_TOLERANCE = 20 * 2**20
"""Growth allowed while the flood passes: allocator noise, not the flood. Measured: 4-6 MiB
with bounded queues; 60 MiB on the old code (50,000 queued events)."""


@pytest.fixture(
    params=[pytest.param(("asyncio", {}), id="asyncio"), pytest.param(("trio", {}), id="trio")]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Both backends, asyncio without debug mode: its per-callback checks make a 50,000-update
    flood five times slower and measure nothing this test is about."""
    backend: tuple[str, dict[str, object]] = request.param
    return backend


def read_at_least(agent: Any, count: int) -> anyio.Event:
    """An event set once the bridge has read ``count`` updates from the agent's stdout."""
    reached = anyio.Event()
    seen = [0]

    def observe(direction: str, line: Any) -> None:
        if direction == "in" and b"session/update" in bytes(line):
            seen[0] += 1
            if seen[0] >= count:
                reached.set()

    agent.connection.peer.add_observer(observe)
    return reached


def drain_nowait(events: MemoryObjectReceiveStream[Any]) -> tuple[list[Any], bool]:
    """What is queued, and whether the stream then ends (True) or would block (False)."""
    queued = []
    while True:
        try:
            queued.append(events.receive_nowait())
        except anyio.EndOfStream:
            return queued, True
        except anyio.WouldBlock:
            return queued, False


async def test_a_flood_with_a_slow_subscriber_keeps_memory_flat_and_loses_nothing(
    tmp_path: Path,
) -> None:
    spec = AgentSpec([sys.executable, "-u", str(AGENTS / "echo_agent.py")], name="echo")
    me = psutil.Process()
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    texts: list[str] = []
    try:
        async with (
            open_supervised_agent(spec, ClientOptions()) as agent,
            open_conversation(store, agent, record) as conv,
        ):
            primary = conv.subscribe()
            bystander = conv.subscribe()  # never reads: disconnected, never slows the turn
            # The reader stops once the primary's queue and the turn's buffer are full: read
            # nothing until that much has come in, so the flood presses on the bounds.
            backed_up = read_at_least(agent, SUBSCRIBER_BUFFER + ClientOptions().turn_buffer)
            baseline = me.memory_info().rss
            peak = baseline
            await conv.send(f"flood {FLOOD}")
            with anyio.fail_after(60):
                await backed_up.wait()
            assert primary.statistics().current_buffer_used <= SUBSCRIBER_BUFFER
            peak = max(peak, me.memory_info().rss)
            with anyio.fail_after(120), primary:
                async for event in primary:
                    if event["event"] == "update":
                        texts.append(event["update"]["content"]["text"])
                        if len(texts) % 5000 == 0:
                            peak = max(peak, me.memory_info().rss)
                    elif event["event"] == "turn_ended":
                        break
            with bystander:
                left, ended = drain_nowait(bystander)
    finally:
        store.close()
    growth = peak - baseline
    assert growth < RSS_TOLERANCE, f"RSS grew {growth / 2**20:.1f} MiB during the flood"
    assert texts == [f"flood-1-{i} " for i in range(FLOOD)]
    assert ended and len(left) <= SUBSCRIBER_BUFFER
