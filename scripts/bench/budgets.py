"""The budgets of design.md and the issues, judged on ``scripts/bench.py``'s raw samples.

Pure: ``{name: [value per run]}`` in, :class:`Budget` rows out (pass, miss or not measured, and
the known cause of a miss). The budgets themselves are data, :data:`TABLE`: one :class:`Rule` per
budget, and :func:`budgets` is the one loop that judges them.
"""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable
from dataclasses import dataclass

Values = dict[str, list[float]]
Notes = dict[str, str]
MB_IN_MIB = 1e6 / 2**20


@dataclass
class Budget:
    """One budget judged: what the summary prints and the JSON file keeps."""

    name: str
    budget: str
    source: str
    measured: str
    verdict: str
    """``pass``, ``miss`` or ``not measured``."""
    cause: str = ""


@dataclass(frozen=True)
class Rule:
    """One budget: what it compares, how, against which limit, and how the figure is printed."""

    name: str
    text: str
    """The budget as printed; ``{largest:,}`` is the largest size measured under ``sized_by``."""
    source: str
    measure: str | Callable[[Values], float | None]
    """A sample key (its median is judged), or a function deriving the figure from the samples."""
    compare: str
    """The figure passes when ``figure <compare> limit * scale`` holds."""
    limit: float
    shown: str | Callable[[float, Values, Notes], str]
    """The printed figure: a format applied to ``figure / scale`` (its unit in it), or a
    function of the figure, the samples and the notes."""
    scale: float = 1.0
    """Sample units per printed unit (the samples hold MiB, the memory budgets say MB)."""
    sized_by: str = ""
    """The sample prefix whose largest size ``text`` names."""

    def figure(self, values: Values) -> float | None:
        measure = self.measure
        return med(values, measure) if isinstance(measure, str) else measure(values)

    def passes(self, figure: float) -> bool:
        return COMPARE[self.compare](figure, self.limit * self.scale)

    def show(self, figure: float, values: Values, notes: Notes) -> str:
        if callable(self.shown):
            return self.shown(figure, values, notes)
        return self.shown.format(figure / self.scale)


COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}


def med(values: Values, key: str) -> float | None:
    found = values.get(key)
    return statistics.median(found) if found else None


def cell(values: Values, key: str, digits: int = 0, unit: str = "") -> str:
    """``median (min–max)`` of a key; the spread shows how noisy the machine was."""
    found = values.get(key)
    if not found:
        return "–"
    low, high, mid = min(found), max(found), statistics.median(found)
    dash = " to " if low < 0 else "–"
    if len(found) == 1:
        return f"{mid:,.{digits}f}{unit}"
    return f"{mid:,.{digits}f}{unit} ({low:,.{digits}f}{dash}{high:,.{digits}f})"


def linear(values: Values, prefix: str, sizes: list[int], per_unit: bool) -> float | None:
    """Cost per item at the largest size over that at the next smaller one (1.0 is linear)."""
    if len(sizes) < 2:
        return None
    small, large = sizes[-2], sizes[-1]
    if per_unit:  # keys hold seconds for the whole size
        a, b = med(values, f"{prefix}.{small}.ours_s"), med(values, f"{prefix}.{large}.ours_s")
        return None if a is None or b is None else (b / large) / (a / small)
    a = med(values, f"{prefix}.{small}.turns_per_s")
    b = med(values, f"{prefix}.{large}.turns_per_s")
    return None if a is None or b is None else a / b  # time per turn, large over small


def sizes_of(values: Values, prefix: str) -> list[int]:
    parts = (k.split(".") for k in values if k.startswith(prefix + "."))
    return sorted({int(p[1]) for p in parts if p[1].isdigit()})


CAUSES = {
    "queue": (
        "The store's default durability is `process` (WAL, `synchronous=NORMAL`: a commit "
        "survives a crash or SIGKILL of the bridge), a draining queue makes one commit per "
        "turn (a message's final state and the next message's start together, "
        "conversation/group_commit.py), and those commits now run on the event "
        "loop's thread whenever that cannot wait, with WAL checkpoints in a thread of their "
        "own (a worker thread's round trip cost more than the statements): 0.14x the SDK at "
        "first, 0.22-0.24x with the group commit, about a third now. What is left per message "
        "is the turn itself (0.65 ms in the conversation, 0.4 ms alone) and about 0.6 ms "
        "between turns (the commit's statements and WAL write, the queue machine's step, "
        "three events, a task per turn), against the SDK's 0.4 ms per bare prompt; half its "
        "rate would leave the conversation layer about 0.15 ms per message (bench_turns' "
        "section below breaks it down)."
    ),
    "cancel_vs_sdk": (
        "Both sides idle 60 ms before each prompt, as a person's cancel never follows the last "
        "one at once. Back to back (the figure in brackets) our driver first waits out its "
        "settle window after each cancelled turn (50 ms, the fence against late updates) and "
        "the SDK waits for nothing, so every cancel of ours starts from a process idle that "
        "long and the SDK's does not. The verdict compares the SDK with its agent started as "
        "the bridge starts every agent, in a session of its own (one group to kill, no "
        "controlling terminal): on Linux each session is its own scheduler group, and a woken "
        "agent there answers about 0.03 ms later. Our part before the wire is much faster than "
        "the SDK's; our part after the agent's answer (decoding and classifying the line, "
        "resolving the pending call, the turn's machine closing the turn, one scheduler pass "
        "to the driver, the session's lock) is slower. bench_turns' section below breaks it "
        "down."
    ),
    "proxy_latency": (
        "The proxy adds two process wake-ups per round trip; on a saturated 2-core machine they "
        'wait for a free core (see "Proxy overhead" below: 0.27–0.39 ms at load 3–4, over '
        "1 ms at load 8)."
    ),
    "proxy_ratio": (
        "Borderline, not noise alone: on a 2-core box the proxy is a third process competing "
        "for two cores with the agent and the reader, and every update crosses one more pipe. "
        "Forwarding a read's run of update lines as one block, reading the agent 64 KiB at a "
        "time (asyncio asked 256 KiB, mapping fresh pages per read) and checking a block in two "
        "passes put single runs between about 0.85x and 1.05x; what remains is the extra copy "
        "through the proxy's pipes and its wake-ups."
    ),
    "stream_ratio": (
        "Single runs on this shared machine spread by +/-25%; see bench_client's section for "
        "the per-update costs that remain."
    ),
    "oneshot": (
        "The agent is spawned first and starts while the bridge imports; the wire models are "
        "built on first use (a one-shot builds 4 of about 100); the state machines' events and "
        "the records are @record classes that compile only their __init__ (frozen dataclasses "
        "compiled five or six methods each, 60-80 ms of the import); and a run ends without the "
        "interpreter's teardown (about 17 ms). Where a one-shot's time goes now: the "
        "interpreter's start, about 40 ms (plus this checkout's editable-install finder and "
        "this machine's CA hook, ~25 ms, which an installed package does not pay); parsing and "
        "the spawn, about 45 ms; the import, about 200 ms, of which pydantic is about 65 ms; "
        "during the run about 18 ms of model builds and 13 ms to claim and release the store. "
        "Runs spread by about +/-20% on this machine: single runs land between 0.9x and 1.3x."
    ),
    "stream_rate": (
        "An absolute rate: on a saturated shared machine it falls with the load while the ratio "
        "to the SDK client measured in the same runs holds; bench_client's section below has "
        "runs at a lower load."
    ),
    "help": (
        "An absolute time, most of it the interpreter starting on a loaded machine; the parser "
        "alone is in the built-in agent's import table below."
    ),
    "recovery": "The agent's own start is a Python interpreter starting; see bench_client below.",
    "memory_one": (
        "Most of the RSS is the interpreter and the imports (anyio, pydantic, psutil, and "
        "jsonrpcserver's jsonschema on the first peer)."
    ),
}


# -- figures derived from several samples -------------------------------------------------------


def cancel_vs_sdk(values: Values) -> float | None:
    """Our cooperative cancel over the SDK's, like for like when measured: the SDK's agent
    started in a session of its own, as the bridge starts every agent
    (:data:`scripts.bench.turns.OWN_SESSION` says why that matters); else the SDK's agent in
    the caller's session."""
    ours = med(values, "cancel.ours_total_ms")
    sdk = med(values, "cancel.sdk_own_total_ms") or med(values, "cancel.sdk_total_ms")
    return None if ours is None or not sdk else ours / sdk


def grace_worst_error(values: Values) -> float | None:
    """The largest close error (ms, absolute) over the grace windows measured."""
    errors = [
        abs(m)
        for k in values
        if k.startswith("grace.") and k.endswith(".error_ms")
        if (m := med(values, k)) is not None
    ]
    return max(errors) if errors else None


def replay_linearity(values: Values) -> float | None:
    return linear(values, "replay", sizes_of(values, "replay"), per_unit=True)


def queue_linearity(values: Values) -> float | None:
    return linear(values, "queue_growth", sizes_of(values, "queue_growth"), per_unit=False)


def cancel_shown(value: float, values: Values, notes: Notes) -> str:
    """The like-for-like ratio, then the other two ways of comparing, where measured."""
    ours, sdk = med(values, "cancel.ours_total_ms"), med(values, "cancel.sdk_total_ms")
    ours_b2b = med(values, "cancel.ours_b2b_total_ms")
    sdk_b2b = med(values, "cancel.sdk_b2b_total_ms")
    said = []
    if med(values, "cancel.sdk_own_total_ms") and ours is not None and sdk:
        said.append(f"its agent in the caller's session: {ours / sdk:.2f}x")
    if ours_b2b and sdk_b2b:
        said.append(f"back to back {ours_b2b / sdk_b2b:.2f}x")
    return f"{value:.2f}x" + (f" ({'; '.join(said)})" if said else "")


def imports_shown(value: float, values: Values, notes: Notes) -> str:
    return "neither" if value == 0 else f"imports {notes.get('startup.heavy_modules')}"


# -- the budgets --------------------------------------------------------------------------------

TABLE: tuple[Rule, ...] = (
    Rule("stream_ratio", "streaming 10,000 chunks: >= 2x the SDK client, same stdlib agent",
         "design.md", "stream.ratio", ">=", 2, "{:.2f}x"),
    Rule("stream_rate", "streaming from the stdlib flood agent: >= 50,000 updates/s",
         "design.md", "stream.ours_updates_per_s", ">=", 50_000, "{:,.0f}/s"),
    Rule("proxy_ratio", "proxy throughput >= 0.9x the direct pipe",
         "design.md", "proxy.throughput_ratio", ">=", 0.9, "{:.3f}x"),
    Rule("proxy_latency", "proxy: median added round trip < 0.5 ms",
         "design.md", "proxy.added_latency_ms", "<", 0.5, "+{:.3f} ms"),
    Rule("cancel", "cooperative cancel: the agent's `cancelled` -> the caller <= 5 ms",
         "design.md", "cancel.ours_after_answer_ms", "<=", 5, "{:.2f} ms"),
    Rule("cancel_vs_sdk",
         "cooperative cancel: request -> the caller sees `cancelled`, no slower than the SDK "
         "(its agent started as ours are, in a session of its own)",
         "issue 7", cancel_vs_sdk, "<=", 1.0, cancel_shown),
    Rule("grace", "stubborn agent: the turn closes at the grace window +/- 50 ms",
         "design.md", grace_worst_error, "<=", 50, "{:+.1f} ms (worst window)"),
    Rule("recovery", "SIGKILL mid-turn -> next turn: agent start + init + load + < 150 ms",
         "design.md", "recovery.overhead_ms", "<", 150, "{:+.1f} ms"),
    Rule("help", "`acp-bridge --help` < 150 ms",
         "design.md", "startup.help_ms", "<", 150, "{:.0f} ms"),
    Rule("imports", "`import acp_bridge` imports neither litellm nor the ACP SDK",
         "design.md", "startup.heavy_modules_imported", "==", 0, imports_shown),
    Rule("oneshot", "one-shot `acp-bridge run` <= 1.1x the TypeScript SDK client",
         "issue 8", "startup.run_ratio_ts", "<=", 1.1, "{:.2f}x"),
    Rule("memory_one", "bridge RSS supervising one agent < 50 MB",
         "design.md", "memory.1.bridge_mib", "<", 50, "{:.1f} MB", scale=MB_IN_MIB),
    Rule("memory_extra", "< +2 MB per extra supervised agent",
         "design.md", "memory.per_extra_agent_mib", "<", 2, "+{:.2f} MB", scale=MB_IN_MIB),
    Rule("replay",
         "`session/load` replay linear up to {largest:,} updates "
         "(cost per update at the largest size <= 1.5x the next smaller)",
         "design.md", replay_linearity, "<=", 1.5, "{:.2f}x", sized_by="replay"),
    Rule("queue_growth",
         "queue O(n): time per turn with {largest:,} queued <= 1.5x with the next shorter queue",
         "design.md", queue_linearity, "<=", 1.5, "{:.2f}x", sized_by="queue_growth"),
    Rule("queue", "queue turns/s >= 0.5x the SDK's bare prompts/s, durable across a bridge crash",
         "issue 11 (aim)", "queue.ratio", ">=", 0.5, "{:.2f}x"),
)  # fmt: skip
"""Every budget, in the order the summary prints them."""


def budgets(values: Values, notes: Notes) -> list[Budget]:
    """Each rule of :data:`TABLE` judged on the medians of ``values``."""
    rows = []
    for rule in TABLE:
        text = rule.text
        if rule.sized_by:
            sizes = sizes_of(values, rule.sized_by)
            text = text.format(largest=sizes[-1] if sizes else 0)
        figure = rule.figure(values)
        if figure is None:
            rows.append(Budget(rule.name, text, rule.source, "–", "not measured"))
            continue
        measured = rule.show(figure, values, notes)
        if rule.passes(figure):
            rows.append(Budget(rule.name, text, rule.source, measured, "pass"))
        else:
            cause = CAUSES.get(rule.name, "")
            rows.append(Budget(rule.name, text, rule.source, measured, "miss", cause))
    return rows
