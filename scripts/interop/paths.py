"""The client paths of the interop matrix (its columns), and running one cell.

Every path runs the same scenario against an agent and returns the same verdicts: ``initialize``,
``session/new``, ``stream`` (a prompt whose answer streams the expected text, ``end_turn``),
``cancel`` (a long prompt cancelled after its first chunk, or after 1 s of silence, must end
``cancelled``), ``restart`` (the agent under the bridge is SIGKILLed between turns; the next
prompt on the same session must stream: the bridge restarted the agent and restored the
session) and ``load`` (a second process ``session/load``s the first one's session, then a
prompt on it streams again). The client paths in tests/interop/ print them as one JSON line;
the CLI path reads ``acp-bridge run --json`` events.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.common import ROOT
from scripts.interop.cli import cli_scenario
from scripts.interop.peers import HELLO, Agent, offline_env, verdict

CHECK_NAMES = ("initialize", "session/new", "stream", "cancel", "restart", "load")
INTEROP = ROOT / "tests" / "interop"
STDERR_TAIL = 600
"""Characters of a failed cell's stderr kept in the JSON results."""


@dataclass(frozen=True)
class ClientPath:
    name: str
    what: str
    needs_node: bool = False
    through_proxy: bool = False
    client: str = ""
    restarts: bool = False
    """The bridge in this path restarts a dead agent (the library and the proxy do)."""
    """``python:SCRIPT`` or ``node:SCRIPT`` under tests/interop, or ``cli``."""


PATHS = [
    ClientPath("cli", "`acp-bridge run --json` (our CLI)", client="cli"),
    ClientPath(
        "library",
        "our library: open_supervised_agent, open_conversation",
        client="python:bridge_client.py",
        restarts=True,
    ),
    ClientPath("py-sdk", "official Python SDK client, direct", client="python:sdk_client.py"),
    ClientPath(
        "py-sdk+proxy",
        "official Python SDK client through `acp-bridge proxy`",
        through_proxy=True,
        client="python:sdk_client.py",
        restarts=True,
    ),
    ClientPath(
        "ts-sdk",
        "official TypeScript SDK client, direct",
        needs_node=True,
        client="node:node/matrix_client.mjs",
    ),
    ClientPath(
        "ts-sdk+proxy",
        "official TypeScript SDK client through `acp-bridge proxy`",
        needs_node=True,
        through_proxy=True,
        client="node:node/matrix_client.mjs",
        restarts=True,
    ),
]


def proxy_argv(agent_argv: list[str], workdir: Path) -> list[str]:
    log = str(workdir / "proxy.log")
    return [sys.executable, "-m", "acp_bridge", "proxy", "--log", log, "--", *agent_argv]


def run_cell(agent: Agent, path: ClientPath, workdir: Path) -> dict[str, Any]:
    """Run one cell; its verdicts, what was not checked and why, and its stderr tail."""
    workdir.mkdir(parents=True, exist_ok=True)
    agent_argv = agent.argv(workdir)
    if path.through_proxy:
        agent_argv = proxy_argv(agent_argv, workdir)
    started = time.monotonic()
    if path.client == "cli":
        checks, info, stderr = cli_scenario(agent, agent_argv, workdir)
    else:
        checks, info, stderr = script_scenario(agent, path, agent_argv, workdir)
    not_checked: dict[str, str] = {}
    if agent.slow is None:
        not_checked["cancel"] = "the agent has no turn long enough to cancel"
    if not agent.loads:
        not_checked["load"] = "the agent offers no session/load (loadSession false)"
        not_checked["restart"] = (
            "the agent can neither load nor resume a session, so no restart can keep it"
            " (through the proxy the next prompt gets an error with recoverable false, as"
            " docs/proxy.md says)"
        )
    elif not path.restarts:
        not_checked["restart"] = "a bare SDK client does not restart agents (the proxy adds that)"
    for name in CHECK_NAMES:
        if name not in checks and name not in not_checked:
            not_checked[name] = "not reached: an earlier step failed"
    failed = {n: c["detail"] for n, c in checks.items() if not c["ok"]}
    return {
        "agent": agent.name,
        "path": path.name,
        "status": "fail" if failed else "pass",
        "checks": checks,
        "not_checked": not_checked,
        "reasons": failed,
        "info": info,
        "seconds": round(time.monotonic() - started, 1),
        "stderr_tail": stderr[-STDERR_TAIL:] if failed else "",
    }


def script_scenario(
    agent: Agent, path: ClientPath, agent_argv: list[str], workdir: Path
) -> tuple[dict[str, Any], dict[str, Any], str]:
    kind, script = path.client.split(":", 1)
    runner = [sys.executable] if kind == "python" else ["node"]
    scenario = {
        "hello": HELLO,
        "expect": agent.expect,
        "slow": agent.slow,
        "load": agent.loads,
        "restart": agent.loads and path.restarts,
        "cwd": str(workdir),
        "timeout": agent.step_timeout,
    }
    argv = [*runner, str(INTEROP / script), json.dumps(scenario), "--", *agent_argv]
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=workdir,
            env=offline_env(),
            timeout=agent.step_timeout * 8,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = (
            (expired.stderr or b"").decode(errors="replace")
            if isinstance(expired.stderr, bytes)
            else (expired.stderr or "")
        )
        return (
            {
                "initialize": verdict(
                    False, f"the client did not finish within {agent.step_timeout * 8:.0f} s"
                )
            },
            {},
            stderr,
        )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        detail = f"the client exited {result.returncode} without a verdict"
        return {"initialize": verdict(False, detail)}, {}, result.stderr
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed["checks"], parsed.get("info", {}), result.stderr
