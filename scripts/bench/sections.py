"""The per-script suites a full ``scripts/bench.py`` run re-runs, each rewriting its section.

Each suite takes the markdown file (or None: measure only) and the runs per measurement, and
returns its raw samples for the JSON file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scripts.bench import client as bench_client
from scripts.bench import turns as bench_turns
from scripts.common import write_section


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


SECTIONS: list[tuple[str, Callable[[Path | None, int], Any]]] = [
    ("rpc", section_rpc),
    ("client", section_client),
    ("turns", section_turns),
    ("floods", section_floods),
    ("agent", section_agent),
]
"""The per-script suites a full run re-runs, each rewriting its own section of the doc."""
