"""The interop matrix: acp-bridge against real third-party ACP software, offline.

Rows are agents: acp-bridge's stdlib fixture echo agent (the baseline), an agent on the official
Python SDK, one on the official TypeScript SDK (Node), fast-agent-mcp's ACP server with its
offline ``slow`` (passthrough) model, and acp-bridge's own litellm agent with a mock script.
Columns are client paths: ``acp-bridge run``, acp-bridge's library, the official Python SDK
client direct and through ``acp-bridge proxy``, the official TypeScript SDK client direct and
through the proxy. Each cell checks initialize, session/new, a streamed turn, a cancel and a
session/load in a second process (the last two where the agent supports them); see
scripts/interop/paths.py.

Run from the repository: ``python scripts/interop.py`` (add ``--write docs/interop.md`` and
``--json FILE``). The first run installs fast-agent-mcp into a venv under the cache directory and
runs ``npm ci`` in tests/interop/node; later runs fetch nothing. ``--quick`` installs nothing
and runs only the fast cells whose dependencies are present (the smoke test runs it). Exit 0
when no cell failed (skipped cells do not fail the run), 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scripts.common import code_version
from scripts.interop.paths import CHECK_NAMES, PATHS, ClientPath, run_cell
from scripts.interop.peers import (
    PINS,
    Agent,
    Availability,
    agents,
    cache_dir,
    fast_agent_available,
    litellm_version,
    node_available,
    python_sdk_version,
)
from scripts.interop.report import markdown, matrix_text


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="install nothing; only the fast cells whose dependencies are present",
    )
    parser.add_argument("--json", metavar="FILE", help="write the raw results as JSON")
    parser.add_argument("--write", metavar="FILE", help="write the report (docs/interop.md)")
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help="where installs go (default $XDG_CACHE_HOME/acp-bridge-interop)",
    )
    parser.add_argument(
        "--fast-agent-python", metavar="PYTHON", help="a Python >= 3.13 for fast-agent-mcp's venv"
    )
    parser.add_argument(
        "--from-json", metavar="FILE", help="run nothing: print (and --write) the results in FILE"
    )
    parser.add_argument("--agent", action="append", help="only this agent row (repeatable)")
    parser.add_argument("--path", action="append", help="only this client path column (repeatable)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells run at once (default 1; --quick uses 3)"
    )
    return parser.parse_args(argv)


def availability(args: argparse.Namespace) -> tuple[dict[str, Availability], list[Agent]]:
    """What can run here, by agent and by client path (``node``), installing unless --quick."""
    install = not args.quick
    node = node_available(install)
    fast, executable = fast_agent_available(cache_dir(args.cache), install, args.fast_agent_python)
    rows = agents(executable)
    found = {
        "node": node,
        "typescript-sdk": node,
        "fast-agent": fast,
        "python-sdk": Availability(True, version=python_sdk_version()),
        "fixture-echo": Availability(True, version="fixtures/agents/echo_agent.py (this commit)"),
        "acp-bridge-agent": bridge_agent_availability(),
    }
    return found, rows


def bridge_agent_availability() -> Availability:
    litellm = litellm_version()
    if litellm.endswith("not installed"):
        return Availability(False, "litellm is not installed (pip install -e '.[agent]')")
    return Availability(True, version=f"acp-bridge {acp_bridge_version()}, {litellm}")


def acp_bridge_version() -> str:
    import acp_bridge

    return acp_bridge.__version__


def skip_reason(
    agent: Agent, path: ClientPath, found: dict[str, Availability], quick: bool
) -> str | None:
    if quick and path.name not in agent.quick:
        return "not in --quick"
    if not found[agent.name].ok:
        return found[agent.name].reason
    if path.needs_node and not found["node"].ok:
        return found["node"].reason
    return None


def environment(found: dict[str, Availability]) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.system()} {platform.release()} {platform.machine()}, "
        f"{platform.node()}, {_cpus()} CPUs, load average {_load()}",
        "python": f"Python {platform.python_version()} ({sys.executable})",
        "acp_bridge_commit": code_version(),
        "pins": PINS,
        "versions": {
            name: (a.version if a.ok else f"unavailable: {a.reason}") for name, a in found.items()
        },
    }


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _load() -> str:
    import os

    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
        print(matrix_text(results))
        if args.write:
            Path(args.write).write_text(markdown(results))
        return 1 if any(c["status"] == "fail" for c in results["cells"]) else 0
    found, rows = availability(args)
    rows = [a for a in rows if not args.agent or a.name in args.agent]
    paths = [p for p in PATHS if not args.path or p.name in args.path]
    env = environment(found)
    print(f"interop: {env['date']}, {env['machine']}", file=sys.stderr)
    for name, version in env["versions"].items():
        print(f"  {name}: {version}", file=sys.stderr)
    cells: list[dict[str, Any]] = []
    todo: list[tuple[Agent, ClientPath]] = []
    for agent in rows:
        for path in paths:
            reason = skip_reason(agent, path, found, args.quick)
            if reason is None:
                todo.append((agent, path))
            elif reason != "not in --quick":
                cells.append(
                    {
                        "agent": agent.name,
                        "path": path.name,
                        "status": "skipped",
                        "reasons": {"skipped": reason},
                    }
                )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="acp-interop-") as tmp:

        def one(job: tuple[Agent, ClientPath]) -> dict[str, Any]:
            agent, path = job
            cell = run_cell(agent, path, Path(tmp) / f"{agent.name}--{path.name}")
            mark = "ok  " if cell["status"] == "pass" else "FAIL"
            print(
                f"  {mark} {agent.name:17} {path.name:13} {cell['seconds']:6.1f} s",
                file=sys.stderr,
                flush=True,
            )
            return cell

        jobs = max(args.jobs, 3 if args.quick else 1)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            cells += list(pool.map(one, todo))
    order = {(a.name, p.name): i for i, (a, p) in enumerate((a, p) for a in rows for p in paths)}
    cells.sort(key=lambda c: order.get((c["agent"], c["path"]), 0))
    env["seconds"] = round(time.monotonic() - started, 1)
    results = {
        "environment": env,
        "checks": list(CHECK_NAMES),
        "agents": {a.name: a.what for a in rows},
        "paths": {p.name: p.what for p in paths},
        "cells": cells,
        "quick": args.quick,
    }
    print(matrix_text(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.write:
        Path(args.write).write_text(markdown(results))
    return 1 if any(c["status"] == "fail" for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
