"""The soak's long-lived library loop, run as a child process of ``scripts/soak.py``
(``python -m scripts.soak.library``).

For ``--seconds`` it opens a supervised agent and a conversation on it again and again
(``open_supervised_agent`` + ``open_conversation`` on one ``QueueStore``), alternating the anyio
backends (asyncio, trio), and in each round: sends messages that stream, flood, crash the agent
(SIGKILL, an exit code), interrupt a running turn (``send(..., interrupt=True)``), stop and resume
the queue; and every third round serves a request flood (``request_flood_agent.py`` behind
``fixtures/soak/flood_handshake.py``). After each round it records its own open fd count and
RSS. Being a process of its own, its fds and memory are the library's alone.

It writes one JSON object to ``--out``: rounds, per-round fd and RSS samples, message states,
the number of prompts each tagged message reached the agent (from the agent's prompt log), the
retries it asked for, and errors (an exception in a round is an error, reported, not fatal).
It stops at SIGTERM between rounds, and its agents die with it (the library's shutdown).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import psutil

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.store import QueueStore
from acp_bridge.core.turn_machine import TurnTimings
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from scripts.common import ROOT

SOAK = ROOT / "fixtures" / "soak"
OPTIONS = ClientOptions(
    restart=RestartPolicy(initial_delay_s=0.01, max_delay_s=0.1, max_restarts=1000),
    shutdown=ShutdownTimeouts(stdin_close_grace_s=1.0, term_grace_s=1.0, kill_wait_s=5),
    cancel_grace_s=1.0,
)
POLICY = TurnPolicy(timings=TurnTimings(cancel_grace_s=1.0, turn_timeout_s=20.0))
ROUND_LIMIT_S = 60.0
FINAL = {"done", "cancelled", "superseded", "failed"}
TAG = re.compile(r"\bL\d+Z\b")
_stop = False


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


async def conversation_round(
    workdir: Path, rnd: int, rng: random.Random, out: dict[str, Any]
) -> None:
    store = QueueStore.open(workdir / "library.db")
    try:
        # A new conversation (and agent history) per round: opening a conversation reads all
        # its messages, replies included, so one ever-growing conversation would grow the
        # round's memory with its history; the leak check wants rounds alike.
        record = store.create_conversation(
            agent={"argv": ["soak-library"]}, cwd=str(workdir), now=time.time()
        )
        history = workdir / f"history-{rnd}.json"
        argv = [sys.executable, "-u", str(SOAK / "soak_agent.py"), str(workdir / "prompts.log"),
                "echo_agent.py", "--quiet", "--history", str(history)]  # fmt: skip
        tag = iter(range(rnd * 100, rnd * 100 + 100))
        async with (
            open_supervised_agent(AgentSpec(argv, name="soak-library"), OPTIONS) as agent,
            open_conversation(store, agent, record, policy=POLICY) as conv,
        ):
            with anyio.fail_after(ROUND_LIMIT_S):
                await conv.send(f"echo L{next(tag)}Z; flood {rng.choice((2000, 20000))}")
                await conv.send(f"echo L{next(tag)}Z; burst 2000")
                await conv.send(f"echo L{next(tag)}Z; crash {rng.choice(('KILL', '3', 'TERM'))}")
                await conv.send(f"echo L{next(tag)}Z; stderr 1")
                assert await conv.wait_idle() == "drained"
                # An interrupt: a waiting turn is superseded by the next message.
                await conv.send(f"echo L{next(tag)}Z; wait 10")
                await anyio.sleep(rng.uniform(0.05, 0.3))
                await conv.send(f"echo L{next(tag)}Z", interrupt=True)
                assert await conv.wait_idle() == "drained"
                # A stop pauses the queue; resume goes on with the queued message.
                await conv.send(f"echo L{next(tag)}Z; wait 10")
                await conv.send(f"echo L{next(tag)}Z")
                await anyio.sleep(rng.uniform(0.05, 0.3))
                await conv.stop()
                assert await conv.wait_idle() == "paused"
                await conv.resume()
                assert await conv.wait_idle() == "drained"
                # An explicit retry of a failed message is an asked-for second prompt.
                failed = [m for m in store.messages(record.id) if m.state == "failed"]
                if failed and rng.random() < 0.5:
                    out["retries"].append([record.id, failed[0].seq])
                    await conv.retry(failed[0].seq)
                    assert await conv.wait_idle() == "drained"
    finally:
        store.close()


async def request_flood_round(count: int) -> dict[str, Any]:
    argv = [sys.executable, "-u", str(SOAK / "flood_handshake.py"), "--count", str(count)]
    async with open_supervised_agent(AgentSpec(argv, name="soak-flood"), OPTIONS) as agent:
        tally: dict[str, Any] = {}
        done = anyio.Event()

        def finished(params: Any) -> None:
            tally.update(params)
            done.set()

        agent.connection.peer.on_notification("_flood/done", finished)
        try:
            with anyio.fail_after(ROUND_LIMIT_S):
                await agent.new_session(Path.cwd())
                await done.wait()
        except TimeoutError:
            # The evidence: what the supervisor saw of the agent meanwhile.
            raise RuntimeError(
                f"request flood not done in {ROUND_LIMIT_S:.0f} s; agent events: "
                f"{list(agent.event_log)!r}"[:3000]
            ) from None
        return tally


def final_states(workdir: Path, out: dict[str, Any]) -> None:
    """Message states, and each tagged message's prompts (agent's log) against its allowance:
    one, plus one per ``retry`` this loop asked for."""
    store = QueueStore.open(workdir / "library.db")
    try:
        messages = [m for c in store.list_conversations() for m in store.messages(c.id)]
    finally:
        store.close()
    prompts: dict[str, int] = {}
    log = workdir / "prompts.log"
    if log.exists():
        for line in log.read_text().splitlines():
            match = TAG.search(json.loads(line)["text"])
            if match:
                prompts[match.group()] = prompts.get(match.group(), 0) + 1
    out["states"] = {}
    out["not_final"], out["attempts_over"], out["prompted_twice"] = [], [], []
    for m in messages:
        out["states"][m.state] = out["states"].get(m.state, 0) + 1
        if m.state not in FINAL:
            out["not_final"].append(m.seq)
        allowed = 1 + out["retries"].count([m.conversation_id, m.seq])
        if m.attempts > allowed:
            out["attempts_over"].append(m.seq)
        match = TAG.search(json.dumps(m.content))
        if match and prompts.get(match.group(), 0) > allowed:
            out["prompted_twice"].append(f"{match.group()} x{prompts[match.group()]}")
    out["prompts"] = sum(prompts.values())
    out["messages"] = len(messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backend", choices=["both", "asyncio", "trio"], default="both")
    parser.add_argument(
        "--tracemalloc", action="store_true",
        help="record the biggest allocation growth between round 3 and the last (diagnosis)",
    )  # fmt: skip
    args = parser.parse_args()

    def on_term(signum: int, frame: Any) -> None:
        global _stop
        _stop = True

    signal.signal(signal.SIGTERM, on_term)
    rng = random.Random(args.seed)
    out: dict[str, Any] = {"rounds": 0, "fds": [], "rss_mib": [], "errors": [], "retries": [],
                           "floods": [], "fds_start": fd_count()}  # fmt: skip
    me = psutil.Process()
    deadline = time.monotonic() + args.seconds
    rnd = 0
    while not _stop and (rnd == 0 or time.monotonic() < deadline):
        backend = ("asyncio", "trio")[rnd % 2] if args.backend == "both" else args.backend
        if args.tracemalloc and rnd == 3:
            tracemalloc.start(8)
            baseline = tracemalloc.take_snapshot()
        try:
            anyio.run(conversation_round, args.workdir, rnd, rng, out, backend=backend)
            if rnd % 3 == 2:
                tally = anyio.run(request_flood_round, 20_000, backend=backend)
                out["floods"].append(tally)
        except Exception:
            out["errors"].append(f"round {rnd} ({backend}): {traceback.format_exc()[-2000:]}")
        rnd += 1
        out["rounds"] = rnd
        out["fds"].append(fd_count())
        out["rss_mib"].append(round(me.memory_info().rss / 2**20, 2))
        args.out.write_text(json.dumps(out))
    if args.tracemalloc and tracemalloc.is_tracing():
        growth = tracemalloc.take_snapshot().compare_to(baseline, "traceback")
        out["growth"] = [
            {"kib": round(stat.size_diff / 1024, 1), "count": stat.count_diff,
             "where": stat.traceback.format()[-6:]}
            for stat in growth[:10]
        ]  # fmt: skip
    final_states(args.workdir, out)
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
