"""Benchmark: how fast ``acp-bridge run --json`` prints a long turn (issue #21 item 26).

One turn of :data:`CHUNKS` ``agent_message_chunk`` updates, every event printed as a JSON line
to a pipe this script drains, timed from spawn to exit as a shell sees it:

* ``acp-bridge run --json -m TEXT -- AGENT`` (a fresh store each run, as a first run pays);
* a client on the official TypeScript SDK printing the same events the same way
  (``tests/interop/node/print_client.mjs``: initialize, session/new, one prompt, one
  ``JSON.stringify`` line per ``session/update``, the agent's exit awaited).

The agent is the official TypeScript SDK agent (``tests/interop/node/agent.mjs``), which
streams the prompt's words back one chunk each, so TEXT is :data:`CHUNKS` one-letter words;
without node, the bridge alone runs against ``fixtures/agents/echo_agent.py --chunks N``.
Rounds are interleaved (bridge, TypeScript, bridge, ...; a warm-up round not counted), so a
busy moment of a shared machine hits both sides; the ratio of the medians is the figure
(design.md: ``run --json`` no slower than the TypeScript SDK client printing the same turn).

``--profile`` runs ``run --json`` once under cProfile instead (the library in-process through
``acp_bridge.cli.main.main``, stdout to a pipe) and prints the top functions.

Run ``python -m scripts.bench.bench_json_render`` (``--runs N``, ``--chunks N``,
``--write docs/benchmarks.md``, ``--profile``). Needs ``node`` and ``npm ci`` in
``tests/interop/node`` for the TypeScript side.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.oneshot import NODE_DIR, node_ready
from scripts.common import ROOT, code_version, machine, write_section

CHUNKS = 50_000
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = str(ROOT)
TS_AGENT = ["node", str(NODE_DIR / "agent.mjs")]
TS_CLIENT = ["node", str(NODE_DIR / "print_client.mjs")]


def fixture_agent(chunks: int) -> list[str]:
    echo = str(ROOT / "fixtures" / "agents" / "echo_agent.py")
    return [sys.executable, echo, "--quiet", "--prompt-words", "--chunks", str(chunks)]


def words(chunks: int) -> str:
    """The prompt: ``chunks`` one-letter words (an argument stays under Linux's 128 KiB)."""
    return " ".join(["x"] * chunks)


def timed(argv: list[str], cwd: Path, updates: int) -> tuple[float, float]:
    """Wall seconds of ``argv`` with stdout to a pipe read to the end, and the CPU seconds
    (user + system) of it and its agent; it must print at least ``updates`` update lines."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, timeout=600)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    printed = done.stdout.count(b'"event":"update"')
    if done.returncode != 0 or printed < updates:
        raise SystemExit(
            f"{argv[:4]} failed: exit {done.returncode}, {printed} updates printed; "
            f"{done.stderr[-2000:]!r}"
        )
    return elapsed, cpu


def rounds(runs: int, chunks: int) -> dict[str, list[float]]:
    """``runs`` interleaved rounds after a warm-up one: wall and CPU seconds of the bridge
    and, when node and the SDK are there, of the TypeScript client."""
    compileall.compile_dir(str(ROOT / "acp_bridge"), quiet=1)
    have_node = node_ready(install=False)
    agent = TS_AGENT if have_node else fixture_agent(chunks)
    text = words(chunks) if have_node else "echo"
    measured: dict[str, list[float]] = {"bridge": [], "ts": [], "bridge_cpu": [], "ts_cpu": []}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for index in range(runs + 1):
            store = work / f"store{index}" / "s.db"
            bridge = [sys.executable, "-m", "acp_bridge", "run", "--json", "--store", str(store)]
            sides = {"bridge": timed([*bridge, "-m", text, "--", *agent], work, chunks)}
            if have_node:
                sides["ts"] = timed([*TS_CLIENT, text, "--", *agent], work, chunks)
            for side, (wall, cpu) in sides.items():
                if index:
                    measured[side].append(wall)
                    measured[f"{side}_cpu"].append(cpu)
            shown = ", ".join(f"{side} {w:.2f} s (CPU {c:.2f} s)" for side, (w, c) in sides.items())
            print(f"round {index}: {shown}", file=sys.stderr)
    return measured


def report(measured: dict[str, list[float]], runs: int, chunks: int) -> str:
    bridge = statistics.median(measured["bridge"])
    bridge_cpu = statistics.median(measured["bridge_cpu"])
    lines = [
        f"Machine: {machine()}. Code: {code_version()}. Median of {runs} interleaved rounds "
        f"(a warm-up round not counted); one turn of {chunks:,} chunks, every event printed "
        "to a pipe; wall time from spawn to exit, and the CPU time (user + system) of the "
        "client and the agent together.",
        "",
        "| client | wall | updates/s | CPU | wall ratio to the TypeScript client |",
        "|---|---|---|---|---|",
    ]
    if measured["ts"]:
        ts = statistics.median(measured["ts"])
        ts_cpu = statistics.median(measured["ts_cpu"])
        ratios = sorted(b / t for b, t in zip(measured["bridge"], measured["ts"], strict=True))
        lines += [
            f"| `acp-bridge run --json` | {bridge:.2f} s | {chunks / bridge:,.0f} | "
            f"{bridge_cpu:.2f} s | {bridge / ts:.2f}x (per round {ratios[0]:.2f}-"
            f"{ratios[-1]:.2f}) |",
            f"| TypeScript SDK client printing the same | {ts:.2f} s | {chunks / ts:,.0f} | "
            f"{ts_cpu:.2f} s | 1x |",
        ]
    else:
        lines.append(
            f"| `acp-bridge run --json` (echo agent; no node) | {bridge:.2f} s | "
            f"{chunks / bridge:,.0f} | {bridge_cpu:.2f} s | - |"
        )
    return "\n".join(lines) + "\n"


_PROFILED = """
import cProfile, pstats, sys
from acp_bridge.cli.main import main
profile = cProfile.Profile()
profile.enable()
code = main(sys.argv[1:])
profile.disable()
sys.stdout.flush()
stats = pstats.Stats(profile, stream=sys.stderr)
stats.sort_stats("tottime").print_stats(30)
stats.sort_stats("cumulative").print_stats(40)
"""


def profile(chunks: int) -> None:
    """``run --json`` once under cProfile, in-process; the tables go to stderr."""
    have_node = node_ready(install=False)
    agent = TS_AGENT if have_node else fixture_agent(chunks)
    text = words(chunks) if have_node else "echo"
    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "s.db"
        argv = ["run", "--json", "--store", str(store), "-m", text, "--", *agent]
        done = subprocess.run(
            [sys.executable, "-c", _PROFILED, *argv],
            cwd=scratch,
            env=ENV,
            stdout=subprocess.PIPE,
            timeout=600,
        )
        printed = done.stdout.count(b'"event":"update"')
        print(f"exit {done.returncode}, {printed} updates printed", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--write", type=Path, help="record the results in this markdown file")
    parser.add_argument("--profile", action="store_true", help="cProfile one run --json")
    args = parser.parse_args()
    if args.profile:
        profile(args.chunks)
        return
    body = report(rounds(args.runs, args.chunks), args.runs, args.chunks)
    print(body)
    if args.write:
        write_section(
            args.write,
            "bench_json_render",
            body,
            intro="## `run --json` rendering (`scripts/bench/bench_json_render.py`)\n",
        )


if __name__ == "__main__":
    main()
