"""The third-party ACP software scripts/interop.py drives: pinned versions, installs, agents.

Installs happen once, into a cache directory (``--cache``, else
``$XDG_CACHE_HOME/acp-bridge-interop``, else ``~/.cache/acp-bridge-interop``), never into the
Python environment that runs acp-bridge: fast-agent-mcp gets its own venv, the TypeScript SDK
is installed by ``npm ci`` from tests/interop/node's lockfile. A finished install leaves a
marker file; with it present nothing is fetched again. Without a tool (no Node, no Python new
enough for fast-agent, no network for the first install) the peer is *unavailable* with the
reason, and its cells are skipped, not failed.
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.common import ROOT

NODE_DIR = ROOT / "tests" / "interop" / "node"
AGENTS = ROOT / "fixtures" / "agents"

PINS = {
    "fast-agent-mcp": "0.10.44",
    "@agentclientprotocol/sdk": "1.5.1",
    "agent-client-protocol": "0.12.1",
}
"""The versions the matrix is run against. fast-agent-mcp is installed at this version into its
own venv. The TypeScript SDK's version is the one tests/interop/node's lockfile holds; the
Python SDK (the ``dev`` extra of this repository) is the one installed, and the run says so
when it differs from this pin. fast-agent-mcp 0.10.48 (the newest) needs certifi>=2026.10.19,
which the package index here did not have yet."""

FAST_AGENT_MIN_PYTHON = (3, 13)
HELLO = "hello interop world"
EXPECT = "interop world"
SLOW_MOCK_SCRIPT = {
    "replies": [
        {"when": "take your time", "say": "a long answer " * 20, "delay_ms": 200, "hang": True}
    ],
    "default": {"say": "You said: {prompt}"},
}


def cache_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "acp-bridge-interop"


@dataclass
class Availability:
    """Whether a peer can run here; ``reason`` says why not, ``version`` what runs."""

    ok: bool
    reason: str = ""
    version: str = ""
    log: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Agent:
    """One agent row of the matrix.

    ``argv(workdir)`` starts it with its state (history) in ``workdir``, so a second process
    started the same way can load the first one's session. ``slow`` is a prompt that runs long
    enough to be cancelled; ``loads`` says whether it offers ``session/load``. ``step_timeout``
    bounds each protocol step (the acp-bridge agent imports litellm on its first prompt, which
    takes 15 s or more on a loaded 2-core machine).
    """

    name: str
    what: str
    argv: Callable[[Path], list[str]]
    expect: str
    slow: str | None
    loads: bool
    step_timeout: float = 20.0
    quick: tuple[str, ...] = ()
    """The client paths this agent runs with under ``--quick`` (a few seconds each)."""


def node_available(install: bool) -> Availability:
    if shutil.which("node") is None:
        return Availability(False, "node is not installed")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    installed = NODE_DIR / "node_modules" / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        if not install:
            return Availability(
                False,
                f"{NODE_DIR.relative_to(ROOT)}/node_modules is not installed (run npm ci there)",
            )
        if shutil.which("npm") is None:
            return Availability(False, "npm is not installed")
        result = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            return Availability(False, f"npm ci failed (offline?): {result.stderr.strip()[-200:]}")
    package = NODE_DIR / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json"
    sdk = json.loads(package.read_text())["version"]
    return Availability(True, version=f"@agentclientprotocol/sdk {sdk} on Node {node}")


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        return (int(out[0]), int(out[1]))
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def find_fast_agent_python(given: str | None) -> str | None:
    """A Python >= 3.13 for fast-agent-mcp: ``given``, else on PATH, else a pyenv version."""
    candidates: list[str | None] = [given] if given else []
    candidates += [shutil.which(f"python3.{minor}") for minor in (13, 14, 15)]
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates += sorted(glob.glob(f"{pyenv}/versions/3.1[3-9]*/bin/python"), reverse=True)
    for candidate in candidates:
        if (
            candidate
            and (version := _python_version(candidate))
            and version >= FAST_AGENT_MIN_PYTHON
        ):
            return candidate
    return None


def fast_agent_available(
    cache: Path, install: bool, python: str | None
) -> tuple[Availability, Path]:
    pin = PINS["fast-agent-mcp"]
    venv = cache / f"fast-agent-mcp-{pin}"
    marker = venv / "installed.ok"
    executable = venv / "bin" / "fast-agent"
    if marker.exists() and executable.exists():
        return Availability(
            True, version=f"fast-agent-mcp {pin} ({marker.read_text().strip()})"
        ), executable
    if not install:
        return Availability(False, f"fast-agent-mcp {pin} is not installed in {venv}"), executable
    interpreter = find_fast_agent_python(python)
    if interpreter is None:
        return Availability(
            False, "fast-agent-mcp needs Python >= 3.13; none found (--fast-agent-python)"
        ), executable
    print(
        f"interop: installing fast-agent-mcp {pin} into {venv} (once)", file=sys.stderr, flush=True
    )
    steps = [
        [interpreter, "-m", "venv", "--clear", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"fast-agent-mcp=={pin}"],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        if result.returncode != 0:
            tail = [line for line in result.stderr.splitlines() if "ignored" not in line][-3:]
            return Availability(
                False, f"installing fast-agent-mcp failed (offline?): {' '.join(tail)[:240]}"
            ), executable
    python_version = subprocess.run(
        [str(venv / "bin" / "python"), "--version"], capture_output=True, text=True
    ).stdout.strip()
    marker.write_text(python_version + "\n")
    return Availability(True, version=f"fast-agent-mcp {pin} ({python_version})"), executable


def python_sdk_version() -> str:
    version = importlib.metadata.version("agent-client-protocol")
    note = (
        ""
        if version == PINS["agent-client-protocol"]
        else f" (pinned {PINS['agent-client-protocol']})"
    )
    return f"agent-client-protocol {version}{note}"


def litellm_version() -> str:
    try:
        return f"litellm {importlib.metadata.version('litellm')}"
    except importlib.metadata.PackageNotFoundError:
        return "litellm not installed"


def fixture(script: str, *flags: str) -> list[str]:
    return [sys.executable, "-u", str(AGENTS / script), "--quiet", *flags]


def bridge_agent(workdir: Path) -> list[str]:
    script = workdir / "mock-script.json"
    script.write_text(json.dumps(SLOW_MOCK_SCRIPT))
    history = str(workdir / "agent-history.db")
    return [
        sys.executable,
        "-m",
        "acp_bridge",
        "agent",
        "--mock-script",
        str(script),
        "--history",
        history,
    ]


def agents(fast_agent: Path) -> list[Agent]:
    """The rows, baseline first."""
    many_words = " ".join(f"w{i}" for i in range(20000))
    return [
        Agent(
            "fixture-echo",
            "acp-bridge's stdlib fixture echo agent (fixtures/agents/echo_agent.py), the baseline",
            lambda w: fixture("echo_agent.py", "--history", str(w / "history.json")),
            EXPECT,
            "trickle 100 100",
            True,
            quick=("cli", "py-sdk+proxy", "ts-sdk+proxy"),
        ),
        Agent(
            "python-sdk",
            "an agent on the official Python SDK (fixtures/agents/sdk_echo_agent.py)",
            lambda w: fixture("sdk_echo_agent.py"),
            EXPECT,
            "flood 200000",
            False,
            quick=("py-sdk+proxy",),
        ),
        Agent(
            "typescript-sdk",
            "an agent on the official TypeScript SDK (tests/interop/node/agent.mjs, Node)",
            lambda w: ["node", str(NODE_DIR / "agent.mjs")],
            EXPECT,
            many_words,
            False,
        ),
        Agent(
            "fast-agent",
            "fast-agent-mcp's ACP server, `fast-agent acp --model slow` "
            "(its passthrough model, 3 s per answer)",
            lambda w: [
                str(fast_agent),
                "--no-update-check",
                "acp",
                "--model",
                "slow",
                "--home",
                str(w / "fa-home"),
            ],
            EXPECT,
            "take your time",
            True,
            step_timeout=90.0,
        ),
        Agent(
            "acp-bridge-agent",
            "acp-bridge's own agent on litellm, offline (`acp-bridge agent --mock-script`)",
            bridge_agent,
            EXPECT,
            "take your time",
            True,
            step_timeout=90.0,
        ),
    ]


def offline_env() -> dict[str, str]:
    """Our environment without provider keys (nothing may reach a model), acp_bridge importable."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_AUTH_TOKEN"))}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    return env


def verdict(ok: bool, detail: str) -> dict[str, Any]:
    return {"ok": ok, "detail": detail[:400]}
