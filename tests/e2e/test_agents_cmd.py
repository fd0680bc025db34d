"""``acp-bridge agents`` through the real process: every named agent, its source and command,
and whether that command is found; a registry file's agents; config errors (exit 2)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

from tests.e2e.test_run_named_agent import bridge


def fake_program(directory: Path, name: str) -> Path:
    directory.mkdir(exist_ok=True)
    program = directory / name
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def listing(tmp_path: Path, *args: str, path: Path) -> dict[str, Any]:
    result = bridge(tmp_path, "agents", "--json", *args, env={"PATH": str(path)})
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


REGISTRY = {
    "version": "1.0.0",
    "agents": [
        {
            "id": "npx-agent",
            "name": "Npx Agent",
            "version": "1.2.3",
            "description": "from npm",
            "distribution": {"npx": {"package": "@acme/agent@1.2.3", "args": ["--acp"]}},
        },
        {
            "id": "bin-agent",
            "name": "Binary Agent",
            "version": "0.1.0",
            "description": "a release archive",
            "distribution": {
                "binary": {
                    "linux-x86_64": {
                        "archive": "https://example.invalid/a.tgz",
                        "cmd": "./bin-agent",
                    },
                    "linux-aarch64": {
                        "archive": "https://example.invalid/b.tgz",
                        "cmd": "./bin-agent",
                    },
                    "darwin-aarch64": {
                        "archive": "https://example.invalid/c.tgz",
                        "cmd": "./bin-agent",
                    },
                    "darwin-x86_64": {
                        "archive": "https://example.invalid/d.tgz",
                        "cmd": "./bin-agent",
                    },
                },
                "uvx": {"package": "bin-agent", "args": ["serve"]},
            },
        },
    ],
}


def test_agents_lists_builtins_registry_and_config_with_found_or_not(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, "goose")
    fake_program(bin_dir, "bin-agent")  # installed: the binary distribution wins over uvx
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps(REGISTRY, indent=2))
    config = tmp_path / "config.toml"
    config.write_text(
        f'registry = "{registry.name}"\n\n'
        "[agents.mine]\n"
        f"command = {json.dumps(sys.executable)}\n"
        'args = ["-u", "agent.py"]\n\n'
        "[agents.gemini]\n"  # no command: adjusts the built-in
        'defaults = { permission = "allow-reads" }\n'
    )
    document = listing(tmp_path, "--config", str(config), path=bin_dir)
    assert document["config"] == str(config)
    assert document["registry"] == str(registry)
    agents = {row["name"]: row for row in document["agents"]}
    builtins = {"claude-agent-acp", "codex-acp", "gemini", "fast-agent", "goose", "opencode"}
    assert builtins | {"mine", "npx-agent", "bin-agent"} <= set(agents)
    assert (agents["goose"]["found"], agents["goose"]["command"]) == (True, ["goose", "acp"])
    assert agents["goose"]["path"] == str(bin_dir / "goose")
    assert (agents["opencode"]["found"], agents["opencode"]["source"]) == (False, "builtin")
    assert agents["gemini"]["source"] == "builtin+config"
    assert agents["gemini"]["command"] == ["gemini", "--acp"]
    assert agents["gemini"]["defaults"] == {"permission": "allow-reads"}
    assert agents["mine"]["source"] == "config" and agents["mine"]["found"] is True
    assert agents["npx-agent"]["command"] == ["npx", "-y", "@acme/agent@1.2.3", "--acp"]
    assert (agents["npx-agent"]["source"], agents["npx-agent"]["found"]) == ("registry", False)
    assert agents["bin-agent"]["command"] == ["bin-agent"]
    assert agents["bin-agent"]["found"] is True

    table = bridge(tmp_path, "agents", "--config", str(config), env={"PATH": str(bin_dir)})
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()[1:]}
    assert rows["goose"][:3] == ["goose", "builtin", "yes"]
    assert rows["opencode"][:3] == ["opencode", "builtin", "no"]


def test_agents_reports_a_config_error_with_file_line_and_fix(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[agents.x]\ncommand = "x"\nflavour = "vanilla"\n')
    result = bridge(tmp_path, "agents", "--config", str(config))
    assert result.returncode == 2
    assert f"{config}:3: [agents.x] has an unknown key 'flavour'; known keys: " in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_a_named_registry_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    result = bridge(tmp_path, "agents", "--registry", str(tmp_path / "none.json"))
    assert result.returncode == 2
    assert f"{tmp_path / 'none.json'}: cannot read the registry file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
