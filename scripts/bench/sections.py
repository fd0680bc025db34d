"""The per-script suites a full ``scripts/bench.py`` run re-runs, each rewriting its section.

Each suite takes the markdown file (or None: measure only) and the runs per measurement, and
returns its raw samples for the JSON file.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scripts.bench import client as bench_client
from scripts.bench import turns as bench_turns
from scripts.common import machine, write_section


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def section_rpc(doc: Path | None, runs: int) -> Any:
    from scripts.bench import rpc as bench_rpc

    rows = bench_rpc.run_all(runs, 100_000, 5_000)
    if doc:
        write_section(doc, "bench_rpc", bench_rpc.render(rows, runs), "")
    return [{"label": r[0], "ours": r[1], "sdk": r[2]} for r in rows]


def section_client(doc: Path | None, runs: int) -> Any:
    client = bench_client.run_all(runs, 10_000)
    if doc:
        body = bench_client.render(client, runs, 10_000) + "\n" + bench_client.WHERE_THE_TIME_GOES
        write_section(doc, "bench_client", body, bench_client.INTRO)
    return client.values


def section_turns(doc: Path | None, runs: int) -> Any:
    backends = bench_turns.BACKENDS
    turns = bench_turns.run_all(runs, 3, 1000, backends)
    if doc:
        body = bench_turns.render(turns, runs, 3, 1000, backends)
        write_section(
            doc, "bench_turns", body + "\n" + bench_turns.WHERE_THE_TIME_GOES, bench_turns.INTRO
        )
    return turns.values


def section_floods(doc: Path | None, runs: int) -> Any:
    from scripts.bench import floods as bench_floods

    floods = bench_floods.run_all(1, False, bench_floods.BACKENDS)
    if doc:
        write_section(doc, "bench_floods", bench_floods.table(floods, 1, False), bench_floods.INTRO)
    return {
        f"{flood}/{backend}": [asdict(m) for m in measured]
        for (flood, backend), measured in floods.items()
    }


def section_agent(doc: Path | None, runs: int) -> Any:
    import importlib.util

    if importlib.util.find_spec("litellm") is None:
        progress("  skipped: litellm is not installed (the agent extra)")
        return None
    from scripts.bench import agent as bench_agent

    load = os.getloadavg()[0]
    figures = bench_agent.initialize_and_first_chunk(runs, 10)
    imports = bench_agent.import_cost(runs)
    if doc:
        write_section(doc, "bench_agent", bench_agent.render(figures, imports, runs, load))
    return {"figures": figures, "imports": imports}


def section_host(doc: Path | None, runs: int) -> Any:
    from scripts.bench import bench_host

    raw = bench_host.run_all(bench_host.Plan(runs=runs))
    if doc:
        write_section(doc, "bench_host", bench_host.render(raw), bench_host.INTRO)
    return raw


STEER_INTRO = (
    "## Steering against queueing (`scripts/bench/bench_steer.py`)\n\n"
    "A conversation on `fixtures/agents/steering_agent.py`; each round prompts `echo go; sleep "
    "MS`, and once its first chunk arrived sends one message with `steer=True` and one plainly. "
    "Timed: the steer from `send` to its `steered` event (the agent's `injected`, committed); "
    "the plain message from `send` to its `turn_started` (it waits for the turn to end).\n"
)


def section_steer(doc: Path | None, runs: int, rounds: int = 20, turn_ms: int = 300) -> Any:
    import anyio

    from scripts.bench import bench_steer

    load = os.getloadavg()
    steer_ms, queued_ms = anyio.run(bench_steer.measure, rounds, turn_ms)
    body = (
        f"{rounds} rounds, turns of {turn_ms} ms; load average {load[0]:.2f} at the start. "
        f"Machine: {machine()}\n\n"
        "| from `send` to | median | min–max |\n|---|---:|---:|\n"
        f"| `steered` (`steer=True`, injected into the running turn) | "
        f"{statistics.median(steer_ms):.2f} ms | {min(steer_ms):.2f}–{max(steer_ms):.2f} ms |\n"
        f"| its own `turn_started` (queued behind the turn) | "
        f"{statistics.median(queued_ms):.2f} ms | {min(queued_ms):.2f}–{max(queued_ms):.2f} ms |\n"
    )
    if doc:
        write_section(doc, "bench_steer", body, STEER_INTRO)
    return {"rounds": rounds, "turn_ms": turn_ms, "steer_ms": steer_ms, "queued_ms": queued_ms}


WS_INTRO = (
    "## WebSocket against Unix socket, the raw transports (`scripts/bench/bench_ws.py`)\n\n"
    "No host: an echo handler behind each transport, lines both ways (the module's text says "
    "how). Through the host, with a client in its own process, see the host's section.\n"
)


def section_ws(doc: Path | None, runs: int, lines: int = 50_000) -> Any:
    from scripts.bench import bench_ws

    runs = min(runs, 3)
    load = os.getloadavg()
    results = bench_ws.run_all(lines, runs)
    line_bytes = len(bench_ws._line(0))
    body = f"Load average {load[0]:.2f} at the start. " + bench_ws.render(
        results, lines, line_bytes, runs
    )
    if doc:
        write_section(doc, "bench_ws", body, WS_INTRO)
    return [{"backend": b, "transport": t, "seconds": s} for b, t, s in results]


def section_pg(doc: Path | None, runs: int) -> Any:
    from scripts.bench import bench_pg  # imports psycopg only when it runs

    return bench_pg.section(doc, runs)


SECTIONS: list[tuple[str, Callable[[Path | None, int], Any]]] = [
    ("rpc", section_rpc),
    ("client", section_client),
    ("turns", section_turns),
    ("floods", section_floods),
    ("agent", section_agent),
    ("host", section_host),
    ("steer", section_steer),
    ("ws", section_ws),
    ("pg", section_pg),
]
"""The per-script suites a full run re-runs, each rewriting its own section of the doc."""
