"""``acp-bridge agents``: the named agents, where each comes from, and whether its command is
installed. Reads files only: nothing is fetched, nothing is started."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from typing import Any

from acp_bridge.cli.agent_config import AgentEntry, ConfigError
from acp_bridge.cli.columns import aligned
from acp_bridge.cli.exit_codes import EXIT_OK, EXIT_USAGE
from acp_bridge.cli.guarded_output import guarded_stdout
from acp_bridge.cli.named_agents import default_config_path, load_catalog

__all__ = ["agents_command"]


def agents_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    with guarded_stdout():  # | head -1: the output ends quietly (see guarded_output)
        return _agents(parser, args)


def _agents(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        catalog = load_catalog(args.config, args.registry)
    except ConfigError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    rows = [_row(entry) for entry in sorted(catalog.agents.values(), key=lambda e: e.name)]
    if args.json:
        document = {
            "config": catalog.config_path,
            "registry": catalog.registry_path,
            "agents": rows,
        }
        print(json.dumps(document, ensure_ascii=False))
        return EXIT_OK
    print(_table(rows))
    config = catalog.config_path or f"{default_config_path()} (none yet)"
    print(f"config: {config}", file=sys.stderr)
    if catalog.registry_path:
        print(f"registry: {catalog.registry_path}", file=sys.stderr)
    return EXIT_OK


def _row(entry: AgentEntry) -> dict[str, Any]:
    path = _find(entry.argv[0]) if entry.argv else None
    return {
        "name": entry.name,
        "source": entry.source,
        "command": list(entry.argv),
        "found": path is not None,
        "path": path,
        "description": entry.description,
        "origin": entry.origin,
        "mcp_servers": [server["name"] for server in entry.mcp_servers],
        "defaults": dict(entry.defaults),
    }


def _find(program: str) -> str | None:
    """Where ``program`` would be run from: PATH for a bare name, else the path itself."""
    if os.sep in program or (os.altsep and os.altsep in program):
        return program if os.access(program, os.X_OK) and os.path.isfile(program) else None
    return shutil.which(program)


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [("NAME", "SOURCE", "FOUND", "COMMAND")]
    for row in rows:
        found = "yes" if row["found"] else "no"
        lines.append((row["name"], row["source"], found, shlex.join(row["command"])))
    return "\n".join(aligned(lines))
