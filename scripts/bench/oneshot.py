"""Benchmark: the CLI's fixed costs (issue #8, "Done when").

1. ``acp-bridge --help`` wall time (budget: under 150 ms).
2. A one-shot ``acp-bridge run -m hello -- AGENT`` against a one-shot client on the official
   TypeScript SDK doing the same job (``tests/interop/node/oneshot.mjs``: spawn, initialize,
   session/new, one prompt, print the text, close, wait for the exit), on the same agent
   (``fixtures/agents/echo_agent.py``), interleaved A B A B in one invocation (budget: at most
   1.1x the TypeScript client's wall time). Each bridge run uses a fresh store in a temporary
   directory, so it pays the store's creation and fsyncs like a first run does.

Both are timed from process start to exit, as a shell sees them. The interpreter is this
script's, with bytecode compiled first (an installed package has it; an editable checkout run
with PYTHONDONTWRITEBYTECODE would recompile every module on every run, which is not what
users see).

Run ``python -m scripts.bench.oneshot`` (``--runs N``, ``--write docs/benchmarks.md``). Needs
``node`` and ``npm ci`` in ``tests/interop/node`` for the TypeScript side, else it is skipped.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.common import ROOT, code_version, machine, write_section

NODE_DIR = ROOT / "tests" / "interop" / "node"
AGENT = [sys.executable, str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = str(ROOT)


def timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, timeout=120)
    elapsed = time.perf_counter() - started
    if result.returncode != 0 or (b"hello" not in result.stdout and b"usage" not in result.stdout):
        raise SystemExit(f"{argv[:4]} failed: {result.returncode} {result.stderr[-2000:]!r}")
    return elapsed


def node_ready(install: bool = True) -> bool:
    """Whether node and the TypeScript SDK are there; ``npm ci`` first when ``install``."""
    if shutil.which("node") is None:
        return False
    if not (NODE_DIR / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
        if not install or shutil.which("npm") is None:
            return False
        subprocess.run(["npm", "ci", "--silent"], cwd=NODE_DIR, check=True, timeout=600)
    return True


def rounds(runs: int, use_node: bool = True, install: bool = True) -> dict[str, list[float]]:
    """``runs`` interleaved rounds (after one warm-up round): ``--help``, the bridge's one-shot
    run and, when node is ready (and ``use_node``), the TypeScript client's; seconds each.
    ``install`` lets it run ``npm ci`` when the TypeScript SDK is missing."""
    compileall.compile_dir(str(ROOT / "acp_bridge"), quiet=1)
    compileall.compile_dir(str(ROOT / "fixtures" / "agents"), quiet=1)
    bridge = [sys.executable, "-m", "acp_bridge"]
    helps: list[float] = []
    bridge_runs: list[float] = []
    ts_runs: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        have_node = use_node and node_ready(install)
        for index in range(runs + 1):  # the first round warms the caches, not counted
            store = work / f"store{index}" / "s.db"
            help_time = timed([*bridge, "--help"], work)
            run_time = timed(
                [*bridge, "run", "--store", str(store), "-m", "hello", "--", *AGENT], work
            )
            ts_time = (
                timed(["node", str(NODE_DIR / "oneshot.mjs"), "hello", "--", *AGENT], NODE_DIR)
                if have_node
                else None
            )
            if index:
                helps.append(help_time)
                bridge_runs.append(run_time)
                if ts_time is not None:
                    ts_runs.append(ts_time)
            print(
                f"round {index}: --help {help_time * 1000:.0f} ms, run {run_time * 1000:.0f} ms"
                + (f", TS client {ts_time * 1000:.0f} ms" if ts_time is not None else ""),
                file=sys.stderr,
            )
    return {"help": helps, "bridge_run": bridge_runs, "ts_run": ts_runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--write", type=Path, help="record the results in this markdown file")
    args = parser.parse_args()
    measured = rounds(args.runs)
    helps, bridge_runs, ts_runs = measured["help"], measured["bridge_run"], measured["ts_run"]
    help_ms = statistics.median(helps) * 1000
    run_ms = statistics.median(bridge_runs) * 1000
    lines = [
        f"Machine: {machine()}. Code: {code_version()}. Median of {args.runs} interleaved rounds "
        f"(a warm-up round not counted), wall time from spawn to exit.",
        "",
        "| measurement | median | budget | verdict |",
        "|---|---|---|---|",
        f"| `acp-bridge --help` | {help_ms:.0f} ms | < 150 ms | "
        f"{'pass' if help_ms < 150 else 'miss'} |",
    ]
    if ts_runs:
        ts_ms = statistics.median(ts_runs) * 1000
        ratio = run_ms / ts_ms
        ratios = sorted(b / t for b, t in zip(bridge_runs, ts_runs, strict=True))
        lines += [
            f"| `acp-bridge run -m hello` (echo agent) | {run_ms:.0f} ms | | |",
            f"| TypeScript SDK one-shot client, same agent | {ts_ms:.0f} ms | | |",
            f"| ratio bridge / TS client (median of medians; per-round range "
            f"{ratios[0]:.2f}-{ratios[-1]:.2f}) | {ratio:.2f}x | <= 1.1x | "
            f"{'pass' if ratio <= 1.1 else 'miss'} |",
        ]
    else:
        lines.append(
            f"| `acp-bridge run -m hello` (echo agent) | {run_ms:.0f} ms | | no node: "
            "TypeScript side skipped |"
        )
    body = "\n".join(lines) + "\n"
    print(body)
    if args.write:
        write_section(
            args.write,
            "oneshot",
            body,
            intro="## CLI fixed costs: `--help` and a one-shot `run` (scripts/bench/oneshot.py)\n",
        )


if __name__ == "__main__":
    main()
