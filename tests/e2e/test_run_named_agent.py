"""``acp-bridge run --agent NAME`` through the real process (issue #8, "What to add" 4).

A named agent from a TOML config brings its command, its environment, its MCP servers and its
default options; the command line still wins. Config errors name the file, the line and the
fix (exit 2). The config is isolated per test: ``$XDG_CONFIG_HOME`` points into tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MCP_AGENT = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "mcp_agent.py"), "--quiet"]


def bridge(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``acp-bridge ARGS`` from the checkout under test, with no user config in the way."""
    base = {k: v for k, v in os.environ.items() if k != "ACP_BRIDGE_CONFIG"}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    base["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**base, **(env or {})},
        timeout=60,
    )


def toml_list(items: list[str]) -> str:
    return json.dumps(items)  # a JSON array of strings is a TOML array of strings


def mcp_agent_config(extra: str = "") -> str:
    return f"""
[agents.helper]
description = "the MCP fixture agent"
command = {json.dumps(MCP_AGENT[0])}
args = {toml_list(MCP_AGENT[1:])}
env = {{ HELPER_TOKEN = "from-config" }}

[agents.helper.defaults]
permission = "allow-all"
grace = 2

[[agents.helper.mcp_servers]]
name = "git"
command = "git-mcp"
args = ["--repo", "."]

[[agents.helper.mcp_servers]]
name = "web"
command = "web-mcp"
env = {{ WEB_LOG = "1" }}
{extra}"""


def servers_reported(stdout: str) -> list[dict[str, Any]]:
    (line,) = [text for text in stdout.splitlines() if text.startswith("mcp-servers ")]
    servers: list[dict[str, Any]] = json.loads(line.split(" ", 1)[1])
    return servers


def test_a_named_agent_brings_its_command_env_mcp_servers_and_defaults(tmp_path: Path) -> None:
    config = tmp_path / "agents.toml"
    config.write_text(mcp_agent_config())
    result = bridge(
        tmp_path,
        "run",
        "--store",
        str(tmp_path / "s.db"),
        "--config",
        str(config),
        "--agent",
        "helper",
        "--mcp",
        "web=other-web --flag 'two words'",  # replaces the config's server of that name
        "-m",
        "env HELPER_TOKEN",
        "-m",
        "mcp-servers",
        "-m",
        "mcp-tool git",  # the config's permission = "allow-all" answers it
    )
    assert result.returncode == 0, result.stderr
    assert "env HELPER_TOKEN=from-config" in result.stdout.splitlines()
    assert servers_reported(result.stdout) == [
        {"name": "git", "command": "git-mcp", "args": ["--repo", "."], "env": []},
        {"name": "web", "command": "other-web", "args": ["--flag", "two words"], "env": []},
    ]
    assert "mcp-tool git allow_once" in result.stdout.splitlines()


def test_the_command_line_wins_over_a_named_agents_defaults(tmp_path: Path) -> None:
    """Found by $ACP_BRIDGE_CONFIG; --permission deny given, so the config's allow-all is not
    used (an abbreviated option counts as given, as argparse reads it)."""
    config = tmp_path / "agents.toml"
    config.write_text(mcp_agent_config())
    result = bridge(
        tmp_path,
        "run",
        "--store",
        str(tmp_path / "s.db"),
        "--agent",
        "helper",
        "--perm",
        "deny",
        "-m",
        "mcp-tool git",
        env={"ACP_BRIDGE_CONFIG": str(config)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["mcp-tool git reject_once"]


def test_a_config_error_names_the_file_the_line_and_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "agents.toml"
    config.write_text(mcp_agent_config().replace("grace = 2", "grace = -2"))
    result = bridge(tmp_path, "run", "--config", str(config), "--agent", "helper", "-m", "hi")
    assert result.returncode == 2
    line = mcp_agent_config().splitlines().index("grace = 2") + 1
    assert f"{config}:{line}: [agents.helper] default grace = -2 must be" in result.stderr
    assert "fix the value" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_agent_and_command_together_or_an_unknown_name_are_usage_errors(tmp_path: Path) -> None:
    """The default config file ($XDG_CONFIG_HOME/acp-bridge/config.toml) is read too."""
    default = tmp_path / "xdg" / "acp-bridge" / "config.toml"
    default.parent.mkdir(parents=True)
    default.write_text(mcp_agent_config())
    both = bridge(tmp_path, "run", "--agent", "helper", "-m", "hi", "--", *MCP_AGENT)
    assert both.returncode == 2
    assert "either --agent NAME or -- CMD, not both" in both.stderr
    unknown = bridge(tmp_path, "run", "--agent", "nope", "-m", "hi")
    assert unknown.returncode == 2
    assert "no agent named 'nope'" in unknown.stderr
    assert "helper" in unknown.stderr and "gemini" in unknown.stderr  # config's and built-ins
    assert f"[agents.nope] in {default}" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
