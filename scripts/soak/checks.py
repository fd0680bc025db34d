"""The soak's ledger (what every part counted and saw) and its invariant checks.

The checks read what the soak's parts left behind: the SQLite store of the ``run`` processes, the
fixture agents' prompt log, the ``turn_started`` events of every bridge output, psutil's process
table, and the fd and RSS samples. Each check returns one :class:`Verdict` with its counts and,
when violated, the evidence.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

FINAL_STATES = ("done", "cancelled", "superseded", "failed")
TAG = re.compile(r"\b[QPD]\d+Z\b")
"""Message tags: Q for run messages, P for proxy prompts, D for drain passes (L: library)."""
RSS_TOLERANCE_MIB = 16.0
RSS_TOLERANCE_RATIO = 0.25
FD_TOLERANCE = 4
BRIDGE_PEAK_RSS_MIB = 150.0
"""A ``run`` process's highest RSS, floods included (a bound, not a flatness judgement: each
run is short-lived)."""


@dataclass
class Ledger:
    """Everything the soak's parts count; read at the end by the checks and the report."""

    counts: Counter[str] = field(default_factory=Counter)
    exit_codes: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    turn_started: Counter[tuple[str, int]] = field(default_factory=Counter)
    asked_retries: Counter[tuple[str, int]] = field(default_factory=Counter)
    started_by: defaultdict[tuple[str, int], list[str]] = field(
        default_factory=lambda: defaultdict(list)
    )
    """Per message, the fault (and --retry-failed) of each run that started a turn for it."""
    notes: list[str] = field(default_factory=list)
    """Things seen that break no promise (known limits), printed in the report."""
    refused_tags: set[str] = field(default_factory=set)
    """Tags of messages whose run was refused (a second owner): never to be prompted."""
    bridge_peak_rss_mib: list[float] = field(default_factory=list)
    proxy_rss_mib: list[float] = field(default_factory=list)
    proxy_fds: list[int] = field(default_factory=list)
    library: dict[str, Any] = field(default_factory=dict)

    def violate(self, text: str) -> None:
        """Record a violation, and say it on stderr at once (the report repeats it)."""
        self.violations.append(text)
        print(f"soak VIOLATION: {text}", file=sys.stderr, flush=True)


@dataclass
class Verdict:
    name: str
    ok: bool
    summary: str
    evidence: list[str] = field(default_factory=list)


def store_rows(store: Path) -> list[sqlite3.Row]:
    if not store.exists():
        return []
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        conn.row_factory = sqlite3.Row
        return list(
            conn.execute(
                "SELECT conversation_id, seq, state, attempts, content FROM messages"
                " ORDER BY conversation_id, seq"
            )
        )
    finally:
        conn.close()


def not_final(store: Path) -> dict[str, list[int]]:
    """Conversation id -> seqs of its messages not in a final state."""
    found: dict[str, list[int]] = {}
    for row in store_rows(store):
        if row["state"] not in FINAL_STATES:
            found.setdefault(row["conversation_id"], []).append(row["seq"])
    return found


def check_final_states(store: Path, library: dict[str, Any]) -> Verdict:
    rows = store_rows(store)
    states = Counter(row["state"] for row in rows)
    bad = [f"{r['conversation_id'][:8]}#{r['seq']} {r['state']}" for r in rows
           if r["state"] not in FINAL_STATES]  # fmt: skip
    bad += [f"library #{seq} not final" for seq in library.get("not_final", [])]
    lib_states = library.get("states", {})
    summary = (
        f"{len(rows)} run messages in {len({r['conversation_id'] for r in rows})} conversations: "
        + ", ".join(f"{s} {states[s]}" for s in FINAL_STATES)
        + f"; library {sum(lib_states.values())}: "
        + ", ".join(f"{s} {lib_states.get(s, 0)}" for s in FINAL_STATES)
    )
    return Verdict("every message in exactly one final state", not bad, summary, bad[:20])


def prompt_log_counts(log: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            match = TAG.search(json.loads(line)["text"])
            if match:
                counts[match.group()] += 1
    return counts


def check_prompted_once(store: Path, log: Path, ledger: Ledger) -> Verdict:
    """Per message: the agent's prompt count (its log), the store's attempts and the
    ``turn_started`` events are each at most 1 + the retries asked for it."""
    prompts = prompt_log_counts(log)
    evidence: list[str] = []
    for row in store_rows(store):
        key = (row["conversation_id"], row["seq"])
        allowed = 1 + ledger.asked_retries[key]
        match = TAG.search(row["content"])
        received = prompts.get(match.group(), 0) if match else 0
        where = f"{key[0][:8]}#{key[1]} ({match.group() if match else '?'})"
        if received > allowed:
            evidence.append(f"{where}: the agent received it {received}x, allowed {allowed}")
        if row["attempts"] > allowed:
            evidence.append(f"{where}: {row['attempts']} attempts stored, allowed {allowed}")
        if ledger.turn_started[key] > allowed:
            evidence.append(
                f"{where}: turn_started {ledger.turn_started[key]}x, allowed {allowed}, by runs "
                f"with faults {ledger.started_by[key]}"
            )
    for tag, n in prompts.items():
        if tag.startswith("P") and n > 1:
            evidence.append(f"proxy prompt {tag} reached the agent {n}x")
        if tag in ledger.refused_tags:
            evidence.append(f"{tag}, sent by a refused second owner, reached the agent {n}x")
    evidence += [f"library {t}" for t in ledger.library.get("prompted_twice", [])]
    evidence += [f"library #{s}: attempts over" for s in ledger.library.get("attempts_over", [])]
    summary = (
        f"{sum(prompts.values())} prompts received by agents "
        f"({sum(n for t, n in prompts.items() if t[0] == 'P')}"
        f" via the proxy), {sum(ledger.turn_started.values())} turn_started events, "
        f"{sum(ledger.asked_retries.values())} retries asked, "
        f"{len(ledger.refused_tags)} second-owner messages refused; "
        f"library {ledger.library.get('prompts', 0)} prompts, "
        f"{len(ledger.library.get('retries', []))} retries asked"
    )
    return Verdict("no message prompted twice unasked", not evidence, summary, evidence[:20])


def tagged_processes(marker: str, tag_var: str, tag: str) -> list[psutil.Process]:
    """Processes started by the soak: ``marker`` (its temp dir) in their argv, or
    ``tag_var=tag`` in their environment. Not this process."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if (
                any(marker in part for part in proc.info["cmdline"] or ())
                or proc.environ().get(tag_var) == tag
            ):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid}: {' '.join(proc.cmdline())[:160]}"
    except psutil.Error:
        return f"pid {proc.pid} (gone)"


def check_orphans(survivors: list[psutil.Process], ledger: Ledger) -> Verdict:
    evidence = [describe(p) for p in survivors]
    evidence += [v for v in ledger.violations if v.startswith("orphan:")]
    summary = (
        f"{ledger.counts['agents seen']} agent processes and {ledger.counts['bridge runs']} "
        f"bridge runs checked at each exit; {len(survivors)} soak processes alive at the end"
    )
    return Verdict("no orphan processes", not evidence, summary, evidence[:20])


def thirds(samples: list[float]) -> tuple[float, float] | None:
    """Median of the first and of the last third, after dropping the first tenth as warm-up;
    None when there are too few samples to judge."""
    kept = samples[len(samples) // 10 :]
    if len(kept) < 6:
        return None
    third = len(kept) // 3
    return statistics.median(kept[:third]), statistics.median(kept[-third:])


def check_fds(soak_before: int, soak_after: int, ledger: Ledger) -> Verdict:
    evidence = []
    if soak_after > soak_before + FD_TOLERANCE:
        evidence.append(f"the soak process: {soak_before} fds before, {soak_after} after")
    lib = ledger.library.get("fds", [])
    parts = [f"soak process {soak_before} -> {soak_after}"]
    if lib:
        parts.append(f"library loop {lib[0]} -> {lib[-1]} over {len(lib)} rounds (max {max(lib)})")
        if max(lib) > lib[0] + FD_TOLERANCE:
            evidence.append(f"library loop fds per round: {lib}")
    if ledger.proxy_fds:
        first, last = ledger.proxy_fds[0], ledger.proxy_fds[-1]
        parts.append(
            f"proxy {first} -> {last} over {len(ledger.proxy_fds)} samples "
            f"(min {min(ledger.proxy_fds)}, max {max(ledger.proxy_fds)})"
        )
        judged = thirds([float(n) for n in ledger.proxy_fds])
        if judged and judged[1] > judged[0] + FD_TOLERANCE:
            evidence.append(f"proxy fds, first-third median {judged[0]}, last {judged[1]}")
    summary = "; ".join(parts) + f" (tolerance +{FD_TOLERANCE})"
    return Verdict("no leaked file descriptors", not evidence, summary, evidence)


def _flat(name: str, samples: list[float], evidence: list[str]) -> str:
    judged = thirds(samples)
    if judged is None:
        return f"{name}: {len(samples)} samples, too few to judge"
    first, last = judged
    limit = first + max(RSS_TOLERANCE_MIB, first * RSS_TOLERANCE_RATIO)
    if last > limit:
        evidence.append(f"{name} RSS grew: first-third median {first:.1f} MiB, last {last:.1f}")
    return f"{name} {first:.1f} -> {last:.1f} MiB (max {max(samples):.1f}, n={len(samples)})"


def check_rss(ledger: Ledger) -> Verdict:
    evidence: list[str] = []
    parts = [
        _flat("proxy", ledger.proxy_rss_mib, evidence),
        _flat("library loop", ledger.library.get("rss_mib", []), evidence),
    ]
    peaks = ledger.bridge_peak_rss_mib
    if peaks:
        parts.append(f"run peaks median {statistics.median(peaks):.1f}, max {max(peaks):.1f} MiB")
        over = [p for p in peaks if p > BRIDGE_PEAK_RSS_MIB]
        if over:
            evidence.append(f"{len(over)} runs above {BRIDGE_PEAK_RSS_MIB} MiB: {over[:5]}")
    summary = "; ".join(parts) + (
        f" (flat: last third's median <= first third's + max({RSS_TOLERANCE_MIB:.0f} MiB, "
        f"{RSS_TOLERANCE_RATIO:.0%}), first tenth skipped; "
        f"run peak <= {BRIDGE_PEAK_RSS_MIB:.0f} MiB)"
    )
    return Verdict("bridge RSS flat, floods included", not evidence, summary, evidence)
