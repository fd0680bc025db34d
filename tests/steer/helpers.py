"""Shared by the steering tests: the steering fixture agents and what they logged."""

from __future__ import annotations

import sys
from pathlib import Path

from acp_bridge.process.spec import AgentSpec

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
STEERING = "steering_agent.py"
BARE = "steering_agent_bare.py"


def argv(script: str, tmp_path: Path, *flags: str) -> list[str]:
    """A steering fixture agent whose sessions outlive it (``--history``)."""
    return [
        sys.executable,
        "-u",
        str(AGENTS / script),
        "--quiet",
        "--max-wait",
        "20",
        "--history",
        str(tmp_path / "history.json"),
        *flags,
    ]


def environment(
    log: Path, hold: Path | None = None, *, draft: bool = False
) -> dict[str, str]:
    env = {"STEERING_AGENT_LOG": str(log)}
    if hold is not None:
        env["STEERING_AGENT_HOLD"] = str(hold)
    if draft:
        env["STEERING_AGENT_DRAFT"] = "1"
    return env


def spec(
    script: str,
    tmp_path: Path,
    log: Path,
    hold: Path | None = None,
    *flags: str,
    draft: bool = False,
) -> AgentSpec:
    """The agent started through ``env`` (so no base environment is needed to add to)."""
    assignments = [f"{k}={v}" for k, v in environment(log, hold, draft=draft).items()]
    return AgentSpec(["env", *assignments, *argv(script, tmp_path, *flags)])


def logged(log: Path) -> list[str]:
    """What the agent received, one line each (``prompt TEXT``, ``steer TEXT``, ...)."""
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def deliveries(log: Path, text: str) -> int:
    """How many times ``text`` reached the agent as something it acts on: a prompt, a steer
    it took, or an extension request the bare agent answered ``{}`` (a probe)."""
    acted = {
        f"prompt {text}",
        f"steer-injected {text}",
        f"steer-startedNewTurn {text}",
        f"steer-deferredByAgent {text}",
        f"ext _session/steering {text}",
    }
    return sum(1 for line in logged(log) if line in acted)
