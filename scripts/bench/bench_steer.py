"""Benchmark: how soon a steer reaches the running turn, against a queued message's wait.

A :class:`~acp_bridge.conversation.conversation.Conversation` (a store in a temporary file) on
``fixtures/agents/steering_agent.py``. Each round prompts ``echo go; sleep MS``: once the turn's
first chunk reached the caller, one message is sent with ``steer=True`` and one plainly. Timed:

* **steer**: from ``send(..., steer=True)`` to the ``steered`` event (the agent's ``injected``
  answer, committed and published);
* **queued**: from the plain ``send`` to that message's ``turn_started`` (it waits for the turn
  to end: about MS less the time already spent in it).

Medians over the rounds. Run ``python -m scripts.bench.bench_steer [--rounds N] [--turn-ms MS]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.store import QueueStore
from acp_bridge.process.spec import AgentSpec

AGENT = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "steering_agent.py"


async def measure(rounds: int, turn_ms: int) -> tuple[list[float], list[float]]:
    steer_ms: list[float] = []
    queued_ms: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = AgentSpec([sys.executable, "-u", str(AGENT), "--quiet"])
        store = QueueStore.open(Path(tmp) / "bench.db")
        record = store.create_conversation(agent={"argv": spec.argv}, cwd=tmp, now=time.time())
        async with (
            open_supervised_agent(spec) as agent,
            open_conversation(store, agent, record) as conv,
        ):
            events = conv.subscribe()
            for _ in range(rounds):
                await conv.send(f"echo go; sleep {turn_ms}")
                await _until(events, "update", None)
                sent = time.perf_counter()
                steer = await conv.send("steer now", steer=True)
                queued_at = time.perf_counter()
                queued = await conv.send("echo queued")
                await _until(events, "steered", steer)
                steer_ms.append((time.perf_counter() - sent) * 1000)
                await _until(events, "turn_started", queued)
                queued_ms.append((time.perf_counter() - queued_at) * 1000)
                assert await conv.wait_idle() == "drained"
        store.close()
    return steer_ms, queued_ms


async def _until(events: Any, kind: str, seq: int | None) -> None:
    """Read events until one of ``kind`` (for message ``seq``, unless None)."""
    with anyio.fail_after(30):
        async for event in events:
            if event["event"] == kind and seq in (None, event.get("seq")):
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--turn-ms", type=int, default=300)
    args = parser.parse_args()
    steer_ms, queued_ms = anyio.run(measure, args.rounds, args.turn_ms)
    print(f"steering benchmark: {args.rounds} rounds, turns of {args.turn_ms} ms")
    steer, queued = statistics.median(steer_ms), statistics.median(queued_ms)
    print(f"  send(steer=True) -> injected (steered event): median {steer:.2f} ms")
    print(f"  queued send -> its turn_started:             median {queued:.2f} ms")


if __name__ == "__main__":
    main()
