"""Benchmark: start-up, memory with many agents, and growth with replay size and queue length.

The figures of issue 11 that no other ``scripts/bench/`` module measures, each next to the official
Python SDK where it does the same job:

1. **agent start** -- spawning ``fixtures/agents/echo_agent.py`` until it answered ``initialize``:
   ``open_supervised_agent`` entered, against ``spawn_agent_process`` + ``initialize``.
2. **memory curve** -- one fresh interpreter opens ``open_supervised_agent`` on the echo agent N
   times (each with a session and one finished turn) and reports, at each count asked for, the
   RSS of its own process (the bridge) and of its whole tree (bridge + agents, psutil).
3. **replay growth** -- ``session/load`` of a session whose replay is N synthetic chunks (the
   echo agent's ``--replay-flood N``), from the request to its answer with every update read:
   ``SupervisedAgent.load_session`` against the SDK's ``load_session`` with a counting client.
4. **queue growth** -- turns/s of a ``Conversation`` with N messages queued at once
   (``scripts.bench.turns.queue_ours``), for several N.

``python scripts/bench.py`` runs these with everything else; this file runs alone too:
``python -m scripts.bench.growth [--quick]`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.bench import turns as bench_turns
from scripts.bench.client import STDLIB_AGENT, CountingClient, agent_argv
from scripts.common import ROOT, module_command

MIB = 1024 * 1024


# -- 1. agent start -----------------------------------------------------------------------------


def spawn_ready_ours(backend: str = "asyncio") -> float:
    """Seconds from entering ``open_supervised_agent`` to holding the initialized agent."""
    import anyio

    from acp_bridge import AgentSpec, open_supervised_agent

    async def run() -> float:
        spec = AgentSpec(agent_argv(STDLIB_AGENT), name="echo-agent")
        started = time.perf_counter()
        async with open_supervised_agent(spec) as _agent:
            return time.perf_counter() - started

    return anyio.run(run, backend=backend)


def spawn_ready_sdk() -> float:
    """Seconds from ``spawn_agent_process`` to the ``initialize`` answer, official SDK."""
    from acp.stdio import spawn_agent_process

    async def run() -> float:
        started = time.perf_counter()
        async with spawn_agent_process(CountingClient(), *agent_argv(STDLIB_AGENT)) as (conn, _p):
            await conn.initialize(protocol_version=1)
            return time.perf_counter() - started

    return asyncio.run(run())


# -- 2. memory curve (child role) -----------------------------------------------------------------


def _rss(process: Any) -> tuple[int, int]:
    """The process's own RSS and its tree's (itself and every descendant), in bytes."""
    import psutil

    own = process.memory_info().rss
    tree = own
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            tree += child.memory_info().rss
    return own, tree


def role_memory_curve(counts: list[int]) -> None:
    """Open supervised echo agents one by one; at each count in ``counts`` print the RSS."""
    import gc

    import anyio
    import psutil

    from acp_bridge import AgentSpec, ClientOptions, open_supervised_agent

    me = psutil.Process()

    async def run() -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        gc.collect()
        result: dict[str, Any] = {"imports": _rss(me)[0], "counts": {}}
        async with contextlib.AsyncExitStack() as stack:
            for n in range(1, max(counts) + 1):
                spec = AgentSpec(agent_argv(STDLIB_AGENT), name=f"echo-{n}")
                agent = await stack.enter_async_context(
                    open_supervised_agent(spec, ClientOptions())
                )
                session = await agent.new_session(ROOT)
                await session.run("hello from the memory benchmark")
                if n in counts:
                    await anyio.sleep(0.1)  # let the stderr pumps and exit watchers settle
                    gc.collect()
                    own, tree = _rss(me)
                    result["counts"][str(n)] = {"bridge": own, "tree": tree}
        return result

    print(json.dumps(anyio.run(run)))


def memory_curve(counts: list[int]) -> dict[str, Any]:
    """Bytes: ``{"imports": n, "counts": {"1": {"bridge": n, "tree": n}, ...}}``, measured in a
    fresh interpreter."""
    command = module_command(
        "scripts.bench.growth", "--role", "memory-curve", ",".join(str(c) for c in counts)
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory curve {counts} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- 3. replay growth -----------------------------------------------------------------------------


def replay_ours(updates: int, backend: str = "asyncio") -> float:
    """Seconds for ``load_session`` of a session whose replay is ``updates`` chunks."""
    import anyio

    from acp_bridge import AgentSpec, open_supervised_agent

    async def run() -> float:
        argv = agent_argv(STDLIB_AGENT, "--replay-flood", str(updates))
        async with open_supervised_agent(AgentSpec(argv, name="echo-agent")) as agent:
            session = await agent.new_session(ROOT)
            started = time.perf_counter()
            loaded = await agent.load_session(session.id, ROOT)
            elapsed = time.perf_counter() - started
            if len(loaded.history) < updates:
                raise RuntimeError(f"ours: {len(loaded.history)} of {updates} replayed")
            return elapsed

    return anyio.run(run, backend=backend)


class ReplayCounter(CountingClient):
    """Counts updates and sets ``done`` once ``target`` arrived: the SDK hands each
    notification to a task of its own, so some may run after ``load_session`` returned."""

    def __init__(self, target: int) -> None:
        super().__init__()
        self.target = target
        self.done = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        await super().session_update(session_id, update, **kwargs)
        if self.updates >= self.target:
            self.done.set()


def replay_sdk(updates: int) -> float:
    """The same ``session/load`` through the official SDK client, until every update ran."""
    from acp.stdio import spawn_agent_process

    argv = agent_argv(STDLIB_AGENT, "--replay-flood", str(updates))

    async def run() -> float:
        client = ReplayCounter(updates)
        async with spawn_agent_process(client, *argv) as (conn, _process):
            await conn.initialize(protocol_version=1)
            session_id = (await conn.new_session(cwd=str(ROOT))).session_id
            client.updates = 0
            client.done.clear()
            started = time.perf_counter()
            await conn.load_session(cwd=str(ROOT), session_id=session_id)
            await asyncio.wait_for(client.done.wait(), 120)
            return time.perf_counter() - started

    return asyncio.run(run())


# -- 4. queue growth ------------------------------------------------------------------------------


def queue_rate(messages: int, backend: str = "asyncio", durability: str = "process") -> float:
    """Turns/s of ``messages`` queued at once through a Conversation (its store on disk, opened
    with ``durability``)."""
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as tmp:
        workdir = Path(tmp).resolve()
        result = bench_turns.queue_ours(backend, messages, workdir, durability=durability)
    return messages / result.wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["memory-curve"], help=argparse.SUPPRESS)
    parser.add_argument("counts", nargs="?", default="", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one run")
    args = parser.parse_args()
    if args.role == "memory-curve":
        role_memory_curve([int(c) for c in args.counts.split(",")])
        return
    runs = 1 if args.quick else 3
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    queues = [10, 100] if args.quick else [10, 100, 1000]
    out: dict[str, Any] = {
        "spawn_ready_ours_ms": statistics.median(spawn_ready_ours() * 1000 for _ in range(runs)),
        "spawn_ready_sdk_ms": statistics.median(spawn_ready_sdk() * 1000 for _ in range(runs)),
        "memory_curve": memory_curve([1, 5] if args.quick else [1, 20, 50]),
        "replay_s": {n: [replay_ours(n), replay_sdk(n)] for n in sizes},
        "queue_turns_per_s": {n: queue_rate(n) for n in queues},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
