"""Every benchmark of acp-bridge in one run: the budgets of design.md and issue 11, measured.

    python scripts/bench.py            # the full suite: writes docs/benchmarks.md and .json
    python scripts/bench.py --quick    # about two minutes: prints the figures, writes nothing

Each figure is the median of several runs, and every comparison runs interleaved (ours, the
official SDK, ours, ...) in this one invocation, so a slow moment of a shared machine hits both
sides alike: ratios count, not absolute times. The measurements themselves live in the other
modules of ``scripts/bench/`` (each still runnable alone: ``python -m scripts.bench.rpc``); this
one runs them, keeps the raw samples (``--json``), and writes the summary at the top of
``docs/benchmarks.md``: every budget against what was measured, pass or miss, and the figures.
The full run then re-runs the per-script suites (``bench_rpc``, ``bench_client``,
``bench_turns``, ``bench_floods``: :mod:`scripts.bench.sections`) and rewrites their sections
of the same file (``--no-sections`` skips them; ``--only`` picks steps and suites by name,
e.g. ``--only turns,floods`` re-runs two suites and leaves the summary).

``--quick`` uses fewer runs and smaller sizes, prints the figures, and exits 0 whatever the
speed: only a benchmark that crashed makes it exit 1. It writes files only when ``--write`` or
``--json`` is given.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scripts.bench import budgets as bench_budgets
from scripts.bench import client as bench_client
from scripts.bench import growth as bench_growth
from scripts.bench import oneshot as bench_oneshot
from scripts.bench import proxy as bench_proxy
from scripts.bench import summary as bench_summary
from scripts.bench import turns as bench_turns
from scripts.bench.sections import SECTIONS
from scripts.common import ROOT, code_version, machine

DOC = ROOT / "docs" / "benchmarks.md"
JSON_FILE = ROOT / "docs" / "benchmarks.json"


@dataclass
class Plan:
    """How much of each benchmark to run."""

    runs: int
    updates: int
    cancels: int
    grace_windows: tuple[float, ...]
    queue_messages: int
    proxy_turns: int
    proxy_round_trips: int
    oneshot_runs: int
    memory_counts: tuple[int, ...]
    memory_runs: int
    replay_sizes: tuple[int, ...]
    queue_sizes: tuple[int, ...]
    install_node: bool
    """Whether the startup step may run ``npm ci`` for the TypeScript client."""


FULL = Plan(
    runs=5,
    updates=10_000,
    cancels=10,  # the verdict sits near 1.0x: 50 cancels a side keep its median steady
    grace_windows=(0.5, 1.0),
    queue_messages=1000,
    proxy_turns=15,
    proxy_round_trips=2000,
    oneshot_runs=7,
    memory_counts=(1, 20, 50),
    memory_runs=3,
    replay_sizes=(1_000, 10_000, 100_000),
    queue_sizes=(10, 100, 1000),
    install_node=True,
)
QUICK = Plan(
    runs=3,
    updates=10_000,
    cancels=2,
    grace_windows=(0.5,),
    queue_messages=200,
    proxy_turns=3,
    proxy_round_trips=400,
    oneshot_runs=2,
    memory_counts=(1, 10),
    memory_runs=1,
    replay_sizes=(1_000, 10_000),
    queue_sizes=(10, 100),
    install_node=False,
)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Samples:
    """Raw measurements by name, one value per run (seconds, rates or bytes, as named)."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}
        self.notes: dict[str, str] = {}

    def add(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(float(value))

    def has(self, key: str) -> bool:
        return bool(self.values.get(key))

    def median(self, key: str) -> float:
        return statistics.median(self.values[key])


# -- the steps: each runs its comparisons interleaved, run by run ------------------------------


def step_streaming(plan: Plan, s: Samples) -> None:
    agent = bench_client.STDLIB_AGENT
    for run in range(plan.runs):
        progress(f"  streaming {plan.updates:,} updates, run {run + 1}/{plan.runs}")
        ours = bench_client.stream_ours(agent, plan.updates, "asyncio")
        sdk = bench_client.stream_sdk(agent, plan.updates)
        s.add("stream.ours_updates_per_s", ours)
        s.add("stream.sdk_updates_per_s", sdk)
        s.add("stream.ratio", ours / sdk)


def step_proxy(plan: Plan, s: Samples) -> None:
    progress(f"  proxy: {plan.proxy_turns} flood turns, {plan.proxy_round_trips} round trips")
    figures = bench_proxy.measure(plan.proxy_turns, 10_000, plan.proxy_round_trips)
    for seconds in figures["direct_turn_samples_s"]:
        s.add("proxy.direct_turn_s", seconds)
    for seconds in figures["proxy_turn_samples_s"]:
        s.add("proxy.proxied_turn_s", seconds)
    s.add("proxy.throughput_ratio", figures["throughput_ratio"])
    s.add("proxy.direct_round_trip_ms", figures["direct_round_trip_median_ms"])
    s.add("proxy.proxied_round_trip_ms", figures["proxy_round_trip_median_ms"])
    s.add("proxy.added_latency_ms", figures["added_latency_median_ms"])
    s.add("proxy.rss_mib", figures["proxy_rss_mib"])


def step_cancel(plan: Plan, s: Samples) -> None:
    for run in range(plan.runs):
        progress(f"  cancel: cooperative x{plan.cancels}, stubborn, run {run + 1}/{plan.runs}")
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            workdir = Path(tmp).resolve()
            pause = bench_turns.CANCEL_PAUSE_S  # both sides idle as long before each prompt
            for side, stamps in (
                ("ours", bench_turns.cancel_ours("asyncio", plan.cancels, workdir, pause)),
                ("sdk", bench_turns.cancel_sdk(plan.cancels, workdir, pause)),
                # Like for like: the SDK's agent in a session of its own, as ours are started.
                ("sdk_own", bench_turns.cancel_sdk(plan.cancels, workdir, pause, own_session=True)),
                # Back to back: our driver waits out its settle window, the SDK nothing.
                ("ours_b2b", bench_turns.cancel_ours("asyncio", plan.cancels, workdir)),
                ("sdk_b2b", bench_turns.cancel_sdk(plan.cancels, workdir)),
            ):
                for st in stamps:
                    s.add(f"cancel.{side}_total_ms", (st.returned - st.requested) * 1000)
                    s.add(f"cancel.{side}_after_answer_ms", (st.returned - st.answer_in) * 1000)
            for window in plan.grace_windows:
                result = bench_turns.grace_ours("asyncio", window, workdir)
                s.add(f"grace.{window:g}.error_ms", (result.closed_s - window) * 1000)
                s.add(f"grace.{window:g}.replaced_ms", result.replaced_s * 1000)


def step_recovery(plan: Plan, s: Samples) -> None:
    for run in range(plan.runs):
        progress(f"  crash -> restored session, run {run + 1}/{plan.runs}")
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            workdir = Path(tmp).resolve()
            recovery = bench_client.recovery_ours(workdir)
            own = bench_client.agent_start_load(workdir, recovery.session_id)
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            by_hand = bench_client.recovery_sdk(Path(tmp).resolve())
        s.add("recovery.ours_ms", recovery.crash_to_update_s * 1000)
        s.add("recovery.agent_start_load_ms", own * 1000)
        s.add("recovery.sdk_by_hand_ms", by_hand * 1000)
        s.add("recovery.overhead_ms", (recovery.crash_to_update_s - own) * 1000)


def step_queue(plan: Plan, s: Samples) -> None:
    n = plan.queue_messages
    for run in range(plan.runs):
        progress(f"  queue: {n:,} messages vs {n:,} SDK prompts, run {run + 1}/{plan.runs}")
        ours = bench_growth.queue_rate(n)
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            workdir = Path(tmp).resolve()
            sdk = bench_turns.queue_sdk(n, workdir)
            commit = bench_turns.bare_commit(workdir)
            commit_normal = bench_turns.bare_commit(workdir, synchronous="NORMAL")
        power = bench_growth.queue_rate(n, durability="power")
        s.add("queue.ours_turns_per_s", ours)
        s.add("queue.sdk_prompts_per_s", sdk)
        s.add("queue.ratio", ours / sdk)
        s.add("queue.power_turns_per_s", power)
        s.add("queue.power_ratio", power / sdk)
        s.add("queue.bare_commit_ms", commit * 1000)
        s.add("queue.bare_commit_normal_ms", commit_normal * 1000)


def step_startup(plan: Plan, s: Samples) -> None:
    progress(f"  startup: --help, one-shot run vs the TypeScript client, x{plan.oneshot_runs}")
    # A quick run never installs the TypeScript SDK (CI has it from the tests, or skips it).
    rounds = bench_oneshot.rounds(plan.oneshot_runs, install=plan.install_node)
    for key, values in rounds.items():
        for seconds in values:
            s.add(f"startup.{key}_ms", seconds * 1000)
    for bridge, ts in zip(rounds["bridge_run"], rounds["ts_run"], strict=False):
        s.add("startup.run_ratio_ts", bridge / ts)
    for _ in range(plan.runs):
        s.add("startup.spawn_ready_ours_ms", bench_growth.spawn_ready_ours() * 1000)
        s.add("startup.spawn_ready_sdk_ms", bench_growth.spawn_ready_sdk() * 1000)
    probe = (
        "import sys, json, acp_bridge, acp_bridge.conversation; "
        "print(json.dumps([m for m in ('litellm', 'acp') if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    heavy = json.loads(done.stdout.strip().splitlines()[-1])
    s.add("startup.heavy_modules_imported", len(heavy))
    s.notes["startup.heavy_modules"] = ", ".join(heavy) or "none"


def step_memory(plan: Plan, s: Samples) -> None:
    counts = list(plan.memory_counts)
    for run in range(plan.memory_runs):
        progress(f"  memory: {counts} supervised agents, run {run + 1}/{plan.memory_runs}")
        curve = bench_growth.memory_curve(counts)
        s.add("memory.imports_mib", curve["imports"] / bench_growth.MIB)
        for count in counts:
            at = curve["counts"][str(count)]
            s.add(f"memory.{count}.bridge_mib", at["bridge"] / bench_growth.MIB)
            s.add(f"memory.{count}.tree_mib", at["tree"] / bench_growth.MIB)
        first, last = curve["counts"][str(counts[0])], curve["counts"][str(counts[-1])]
        extra = (last["bridge"] - first["bridge"]) / (counts[-1] - counts[0]) / bench_growth.MIB
        s.add("memory.per_extra_agent_mib", extra)


def step_replay(plan: Plan, s: Samples) -> None:
    for run in range(plan.runs):
        progress(f"  replay: session/load of {list(plan.replay_sizes)}, run {run + 1}/{plan.runs}")
        for n in plan.replay_sizes:
            s.add(f"replay.{n}.ours_s", bench_growth.replay_ours(n))
            s.add(f"replay.{n}.sdk_s", bench_growth.replay_sdk(n))


def step_queue_growth(plan: Plan, s: Samples) -> None:
    for run in range(plan.runs):
        progress(f"  queue length: {list(plan.queue_sizes)}, run {run + 1}/{plan.runs}")
        for n in plan.queue_sizes:
            s.add(f"queue_growth.{n}.turns_per_s", bench_growth.queue_rate(n))


STEPS: list[tuple[str, Callable[[Plan, Samples], None]]] = [
    ("streaming", step_streaming),
    ("proxy", step_proxy),
    ("cancel", step_cancel),
    ("recovery", step_recovery),
    ("queue", step_queue),
    ("startup", step_startup),
    ("memory", step_memory),
    ("replay", step_replay),
    ("queue_growth", step_queue_growth),
]


# -- main ---------------------------------------------------------------------------------------


def rewrite_summary(raw_path: Path, doc: Path) -> int:
    """The summary again from saved raw samples (after its wording changed, say)."""
    raw = json.loads(raw_path.read_text())
    context = raw["context"]
    context["load_before"], context["load_after"] = (
        tuple(context["load_before"]),
        tuple(context["load_after"]),
    )
    context["suites"] = tuple(context.get("suites", ()))
    values, notes = raw["samples"], raw.get("notes", {})
    budgets = bench_budgets.budgets(values, notes)
    text = bench_summary.render(
        bench_summary.Context(**context), values, notes, budgets, raw.get("errors", {})
    )
    bench_summary.write_summary(doc, text)
    progress(f"wrote {doc}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the ~2-minute subset (CI)")
    parser.add_argument("--runs", type=int, help="runs per comparison (default 5, quick 3)")
    names = [name for name, _ in STEPS] + [name for name, _ in SECTIONS]
    parser.add_argument("--only", help="comma-separated steps and suites: " + ",".join(names))
    parser.add_argument("--write", type=Path, help=f"the markdown file (full default: {DOC})")
    parser.add_argument("--json", type=Path, help=f"raw results (full default: {JSON_FILE})")
    parser.add_argument("--no-sections", action="store_true", help="skip the per-script suites")
    parser.add_argument(
        "--from-json", type=Path, help="measure nothing: write the summary from this raw file"
    )
    args = parser.parse_args()
    if args.from_json:
        return rewrite_summary(args.from_json, args.write or DOC)
    plan = QUICK if args.quick else FULL
    if args.runs:
        plan = Plan(**{**asdict(plan), "runs": args.runs})
    every_step = {name for name, _ in STEPS}
    every_section = set() if args.quick or args.no_sections else {name for name, _ in SECTIONS}
    wanted = set(args.only.split(",")) if args.only else every_step | every_section
    unknown = wanted - set(names)
    if unknown:
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    doc = args.write or (None if args.quick else DOC)
    json_path = args.json or (None if args.quick else JSON_FILE)

    started = time.monotonic()
    load_before = os.getloadavg()
    progress(f"bench: {'quick' if args.quick else 'full'} run, load average {load_before[0]:.1f}")
    samples = Samples()
    errors: dict[str, str] = {}
    for name, step in STEPS:
        if name not in wanted:
            continue
        progress(f"{name} ...")
        try:
            step(plan, samples)
        except Exception:  # one crashed benchmark must not hide the others' figures
            errors[name] = traceback.format_exc()
            progress(f"  {name} CRASHED:\n{errors[name]}")
    sections: dict[str, Any] = {}
    for name, section in SECTIONS:
        if name not in wanted:
            continue
        progress(f"suite {name} ...")
        try:
            sections[name] = section(doc, plan.runs)
        except Exception:
            errors[name] = traceback.format_exc()
            progress(f"  suite {name} CRASHED:\n{errors[name]}")
    load_after = os.getloadavg()
    context = bench_summary.Context(
        mode="quick" if args.quick else "full",
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine(),
        code=code_version(),
        load_before=load_before,
        load_after=load_after,
        plan=asdict(plan),
        seconds=time.monotonic() - started,
        suites=tuple(sections),
    )
    ran_steps = bool(wanted & every_step)
    if ran_steps:
        budgets = bench_budgets.budgets(samples.values, samples.notes)
        text = bench_summary.render(context, samples.values, samples.notes, budgets, errors)
        print(text)
        if doc:
            bench_summary.write_summary(doc, text)
            progress(f"wrote {doc}")
    if json_path:
        # Suites run on their own add to the file; a run of the steps replaces their part.
        raw: dict[str, Any] = {}
        if json_path.exists():
            raw = json.loads(json_path.read_text())
        raw.setdefault("sections", {}).update(sections)
        raw.setdefault("sections_context", {}).update({name: asdict(context) for name in sections})
        if ran_steps:
            raw.update(
                {
                    "context": asdict(context),
                    "samples": samples.values,
                    "notes": samples.notes,
                    "medians": {k: statistics.median(v) for k, v in samples.values.items() if v},
                    "budgets": [asdict(b) for b in budgets],
                    "errors": errors,
                }
            )
        json_path.write_text(json.dumps(raw, indent=1, default=str) + "\n")
        progress(f"wrote {json_path}")
    progress(f"bench: done in {time.monotonic() - started:.0f} s; {len(errors)} crashed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
