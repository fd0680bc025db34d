"""The report of ``scripts/bench.py``: each budget against what was measured, and the figures.

Pure formatting over the raw samples (``{name: [value per run]}``) and the judged budgets
(:mod:`scripts.bench.budgets`); the only I/O is :func:`write_summary`, which puts the report at
the top of ``docs/benchmarks.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.bench.budgets import Budget, Values, cell, med, sizes_of
from scripts.common import write_section

SECTION = "bench"


@dataclass
class Context:
    mode: str
    date: str
    machine: str
    code: str
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    plan: dict[str, Any]
    seconds: float
    suites: tuple[str, ...] = ()
    """The per-script suites re-run in the same invocation (their sections rewritten)."""


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else ""


def figures(values: Values) -> str:
    v = values
    out = ["### Figures (median (min–max) of the runs)\n"]
    rows = [
        [
            "streaming 10,000 chunks, stdlib agent (updates/s)",
            cell(v, "stream.ours_updates_per_s"),
            cell(v, "stream.sdk_updates_per_s"),
            cell(v, "stream.ratio", 2, "x"),
        ],
        [
            "cooperative cancel, both sides idle 60 ms before each prompt: request -> closed (ms)",
            cell(v, "cancel.ours_total_ms", 2),
            cell(v, "cancel.sdk_total_ms", 2),
            _ratio(med(v, "cancel.ours_total_ms"), med(v, "cancel.sdk_total_ms")),
        ],
        [
            "… the SDK with its agent in a session of its own, as ours are started (ms)",
            cell(v, "cancel.ours_total_ms", 2),
            cell(v, "cancel.sdk_own_total_ms", 2),
            _ratio(med(v, "cancel.ours_total_ms"), med(v, "cancel.sdk_own_total_ms")),
        ],
        [
            "… back to back, no idle (our driver waits out its 50 ms settle window first) (ms)",
            cell(v, "cancel.ours_b2b_total_ms", 2),
            cell(v, "cancel.sdk_b2b_total_ms", 2),
            _ratio(med(v, "cancel.ours_b2b_total_ms"), med(v, "cancel.sdk_b2b_total_ms")),
        ],
        [
            "… the agent's answer read -> the caller sees it (ms)",
            cell(v, "cancel.ours_after_answer_ms", 2),
            cell(v, "cancel.sdk_after_answer_ms", 2),
            "",
        ],
    ]
    for key in sorted(k for k in v if k.startswith("grace.") and k.endswith(".error_ms")):
        window = key[len("grace.") : -len(".error_ms")]
        rows.append(
            [
                f"stubborn agent, grace {window} s: close error vs the window (ms)",
                cell(v, key, 1),
                "no grace window",
                "",
            ]
        )
        rows.append(
            [
                "… turn closed -> agent replaced, session restored (ms)",
                cell(v, f"grace.{window}.replaced_ms", 1),
                "never",
                "",
            ]
        )
    rows += [
        [
            "crash -> first update on the restored session (ms)",
            cell(v, "recovery.ours_ms", 1),
            cell(v, "recovery.sdk_by_hand_ms", 1) + " by hand",
            "",
        ],
        [
            "… the agent's own start + initialize + load (ms)",
            cell(v, "recovery.agent_start_load_ms", 1),
            "",
            "",
        ],
        ["… overhead, the two subtracted per run (ms)", cell(v, "recovery.overhead_ms", 1), "", ""],
        [
            "queued `echo hi` through a Conversation vs SDK prompts in a row (turns/s)",
            cell(v, "queue.ours_turns_per_s"),
            cell(v, "queue.sdk_prompts_per_s"),
            cell(v, "queue.ratio", 2, "x"),
        ],
        [
            "… the same with `--durability power` (every commit fsynced) (turns/s)",
            cell(v, "queue.power_turns_per_s"),
            cell(v, "queue.sdk_prompts_per_s"),
            cell(v, "queue.power_ratio", 2, "x"),
        ],
        [
            "a bare SQLite commit, WAL + synchronous=FULL (power), same disk (ms)",
            cell(v, "queue.bare_commit_ms", 2),
            "",
            "",
        ],
        [
            "a bare SQLite commit, WAL + synchronous=NORMAL (process, the default) (ms)",
            cell(v, "queue.bare_commit_normal_ms", 2),
            "",
            "",
        ],
        [
            "agent spawn -> `initialize` answered (ms)",
            cell(v, "startup.spawn_ready_ours_ms", 1),
            cell(v, "startup.spawn_ready_sdk_ms", 1),
            _ratio(med(v, "startup.spawn_ready_ours_ms"), med(v, "startup.spawn_ready_sdk_ms")),
        ],
        ["`acp-bridge --help`, spawn to exit (ms)", cell(v, "startup.help_ms"), "", ""],
        [
            "one-shot `acp-bridge run -m hello` vs the TypeScript SDK client (ms)",
            cell(v, "startup.bridge_run_ms"),
            cell(v, "startup.ts_run_ms") + " (TypeScript)",
            cell(v, "startup.run_ratio_ts", 2, "x"),
        ],
    ]
    out.append(_table(["measurement", "acp-bridge", "official SDK", "ours / SDK"], rows))
    out.append(
        "\nThe proxy, direct pipe against `acp-bridge proxy` to the same echo agent, taking "
        "turns:\n\n"
        + _table(
            ["measurement", "direct pipe", "through the proxy", "ratio / added"],
            [
                [
                    "10,000-chunk turn (s)",
                    cell(v, "proxy.direct_turn_s", 3),
                    cell(v, "proxy.proxied_turn_s", 3),
                    cell(v, "proxy.throughput_ratio", 3, "x"),
                ],
                [
                    "round trip `session/list`, median (ms)",
                    cell(v, "proxy.direct_round_trip_ms", 3),
                    cell(v, "proxy.proxied_round_trip_ms", 3),
                    "+" + cell(v, "proxy.added_latency_ms", 3),
                ],
                ["proxy RSS (MiB)", "", cell(v, "proxy.rss_mib", 1), ""],
            ],
        )
    )
    counts = sizes_of(v, "memory")
    if counts:
        rows = [
            [f"{n}", cell(v, f"memory.{n}.bridge_mib", 1), cell(v, f"memory.{n}.tree_mib", 1)]
            for n in counts
        ]
        out.append(
            "\nMemory: one process opens `open_supervised_agent` on the echo agent N times (a "
            "session and a finished turn each); RSS of the bridge process, and of its whole "
            f"tree with the agents (psutil). After imports, before any agent: "
            f"{cell(v, 'memory.imports_mib', 1)} MiB; per extra agent: "
            f"{cell(v, 'memory.per_extra_agent_mib', 2)} MiB.\n\n"
            + _table(["agents", "bridge RSS (MiB)", "tree RSS (MiB)"], rows)
        )
    sizes = sizes_of(v, "replay")
    if sizes:
        rows = []
        for n in sizes:
            ours, sdk = med(v, f"replay.{n}.ours_s"), med(v, f"replay.{n}.sdk_s")
            per = f"{ours / n * 1e6:.1f}" if ours else "–"
            per_sdk = f"{sdk / n * 1e6:.1f}" if sdk else "–"
            rows.append(
                [
                    f"{n:,}",
                    cell(v, f"replay.{n}.ours_s", 3),
                    cell(v, f"replay.{n}.sdk_s", 3),
                    _ratio(sdk, ours),
                    per,
                    per_sdk,
                ]
            )
        out.append(
            "\nReplay growth: `session/load` of a session whose replay is N chunks (echo agent "
            "`--replay-flood N`), request to answer with every update read; ours "
            "(`SupervisedAgent.load_session`, the replay kept in `Session.history`) against the "
            "SDK's `load_session` with a counting client.\n\n"
            + _table(
                ["updates", "ours (s)", "SDK (s)", "SDK / ours", "ours µs/update", "SDK µs/update"],
                rows,
            )
        )
    queues = sizes_of(v, "queue_growth")
    if queues:
        rows = []
        for n in queues:
            rate = med(v, f"queue_growth.{n}.turns_per_s")
            per = f"{1000 / rate:.2f}" if rate else "–"
            rows.append([f"{n:,}", cell(v, f"queue_growth.{n}.turns_per_s"), per])
        out.append(
            "\nQueue growth: N `echo hi` messages sent at once to a Conversation (its store on "
            "disk), first send to drained.\n\n" + _table(["queued", "turns/s", "ms per turn"], rows)
        )
    return "\n".join(out)


DURABILITY = (
    "**The store's durability**: `QueueStore` (acp_bridge/conversation/store.py) keeps SQLite in "
    "WAL mode. With `durability=\"process\"` (the default; `run --durability process`) it uses "
    "`synchronous=NORMAL`: a returned commit is in the WAL, handed to the operating system, so a "
    "message, its running mark and its final state survive a crash or SIGKILL of the bridge "
    "(nothing lost, nothing prompted twice); a power loss can roll back the latest commits and "
    "never corrupts the file. `durability=\"power\"` uses `synchronous=FULL`: every commit is "
    "fsynced too (the queue's row with it is in the figures). A queued message costs its send's "
    "commit and, while the queue drains, one commit holding its final state and the next "
    "message's start."
)


def render(
    context: Context,
    values: Values,
    notes: dict[str, str],
    rows: list[Budget],
    errors: dict[str, str],
) -> str:
    plan = context.plan
    lb, la = context.load_before, context.load_after
    lines = [
        "## Summary: budgets against measurements (`scripts/bench.py`)\n",
        "```sh\npython scripts/bench.py          # full: this section, the sections below, "
        "docs/benchmarks.json\npython scripts/bench.py --quick  # ~2 minutes, prints only "
        "(CI)\n```\n",
        f"Machine: {context.machine}\n",
        f"Code: acp-bridge at {context.code}. Date: {context.date}. Mode: {context.mode}, "
        f"{plan['runs']} interleaved runs per comparison, {context.seconds / 60:.1f} min. "
        f"Load average (1, 5, 15 min) {lb[0]:.1f}, {lb[1]:.1f}, {lb[2]:.1f} at the start and "
        f"{la[0]:.1f}, {la[1]:.1f}, {la[2]:.1f} at the end, on {_cores()} cores: the machine "
        "was shared, so absolute times are noisy; ratios taken within a run are what counts. "
        + (
            f"Per-script suites re-run with it: {', '.join(context.suites)}."
            if context.suites
            else "The per-script sections below were not re-run with it: each has its own date."
        )
        + "\n",
        _table(
            ["budget", "from", "measured (median)", "verdict"],
            [
                [
                    r.budget,
                    r.source,
                    r.measured,
                    "pass"
                    if r.verdict == "pass"
                    else ("**miss**" if r.verdict == "miss" else r.verdict),
                ]
                for r in rows
            ],
        ),
    ]
    missed = [r for r in rows if r.verdict == "miss"]
    if missed:
        lines.append("**Missed, and why:**\n")
        lines += [
            f"- *{r.budget}* ({r.measured}): {r.cause or 'not analysed yet.'}" for r in missed
        ]
        lines.append("")
    if errors:
        lines.append("**Crashed benchmarks:** " + ", ".join(sorted(errors)) + "\n")
    lines.append(DURABILITY + "\n")
    lines.append(figures(values))
    return "\n".join(lines) + "\n"


def _cores() -> int:
    import os

    return os.cpu_count() or 0


def write_summary(doc: Path, text: str) -> None:
    """Put the report between ``<!-- bench:start/end -->`` markers, the first time right
    before the first ``## `` section of ``doc``."""
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    current = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if start not in current:
        head, sep, rest = current.partition("\n## ")
        block = f"{start}\n{end}\n\n"
        current = head.rstrip() + "\n\n" + block + (sep.lstrip("\n") + rest if sep else "")
        doc.write_text(current)
    write_section(doc, SECTION, text)
