"""Hostile config values, config files given with ``-- CMD``, and where the default files go
(issue #21, items 15, 16 and 19), through the real ``acp-bridge`` process.

Each refusal is the documented one: one line on stderr naming the file (and the line, when
there is one) or the variable, exit 2, and no agent started."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.agent_client import requires_litellm
from tests.e2e.test_run_named_agent import ROOT, bridge, toml_list

ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py")]


def refused(result: subprocess.CompletedProcess[str], *, naming: str) -> str:
    """The one line of a usage error (exit 2), which names ``naming``."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("acp-bridge"), lines
    assert naming in lines[0], lines
    assert result.stdout == ""
    return lines[0]


def agent_config(tmp_path: Path, body: str) -> Path:
    config = tmp_path / "agents.toml"
    config.write_text(f"[agents.x]\ncommand = {json.dumps(ECHO[0])}\n{body}\n")
    return config


# -- 15: values exec() can't take, and files nested too deep --------------------------------------

HOSTILE = {
    "an env name with =": ('env = { "A=B" = "v" }', "'A=B' holds '='"),
    "an empty env name": ('env = { "" = "v" }', "environment name is empty"),
    "a NUL in an env value": ('env = { A = "x\\u0000y" }', "A holds a NUL byte"),
    "a NUL in an env name": ('env = { "A\\u0000" = "v" }', "holds a NUL byte"),
    "a NUL in args": ('args = ["-u", "a\\u0000b"]', "args[1] holds a NUL byte"),
    "an env name with = for an MCP server": (
        '[[agents.x.mcp_servers]]\nname = "m"\ncommand = "m"\nenv = { "K=" = "v" }',
        "MCP server 'm': the environment name 'K=' holds '='",
    ),
    "a NUL in an MCP server's args": (
        '[[agents.x.mcp_servers]]\nname = "m"\ncommand = "m"\nargs = ["\\u0000"]',
        "MCP server 'm': args[0] holds a NUL byte",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_config_value_exec_cannot_take_is_one_line_naming_file_and_line(
    tmp_path: Path, case: str
) -> None:
    """Before #21 an env name with '=' or a NUL byte anywhere ended in a ValueError traceback
    from the spawn (and ``run`` left an empty conversation behind)."""
    body, problem = HOSTILE[case]
    config = agent_config(tmp_path, body)
    store = tmp_path / "s.db"
    result = bridge(
        tmp_path, "run", "--store", str(store), "--config", str(config), "--agent", "x", "-m", "hi"
    )
    line = refused(result, naming=f"{config}:")
    assert problem in line
    assert not store.exists()  # refused before anything was stored
    listed = bridge(tmp_path, "agents", "--config", str(config))
    assert refused(listed, naming=f"{config}:") == line


def test_a_nul_in_the_command_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "agents.toml"
    config.write_text('[agents.x]\ncommand = "my\\u0000agent"\n')
    result = bridge(tmp_path, "run", "--config", str(config), "--agent", "x", "-m", "hi")
    assert "command holds a NUL byte" in refused(result, naming=f"{config}:2")


def test_a_nul_in_the_registry_path_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "agents.toml"
    config.write_text('registry = "a\\u0000.json"\n')
    result = bridge(tmp_path, "agents", "--config", str(config))
    assert "registry must be a file name" in refused(result, naming=f"{config}:1")


@pytest.mark.parametrize("command", ["run", "agents"])
def test_a_config_nested_5000_deep_is_one_line(tmp_path: Path, command: str) -> None:
    """Before #21: a RecursionError traceback from the TOML parser."""
    config = tmp_path / "deep.toml"
    config.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    args = ["-m", "hi", "--agent", "x"] if command == "run" else []
    result = bridge(tmp_path, command, "--config", str(config), *args)
    assert "nested too deeply" in refused(result, naming=str(config))


def test_a_registry_nested_5000_deep_is_one_line(tmp_path: Path) -> None:
    registry = tmp_path / "registry.json"
    registry.write_text('{"agents": ' + "[" * 5000 + "]" * 5000 + "}")
    result = bridge(tmp_path, "agents", "--registry", str(registry))
    assert "nested too deeply" in refused(result, naming=str(registry))


@pytest.mark.parametrize(
    ("distribution", "problem"),
    [
        ({"npx": {"package": "p", "args": ["a\u0000"]}}, "'a\\x00' holds a NUL byte"),
        ({"npx": {"package": "p", "env": {"A=B": "1"}}}, "'A=B' holds '='"),
        ({"uvx": {"package": "p\ud800"}}, "is not valid text"),
    ],
)
def test_a_registry_value_exec_cannot_take_is_one_line(
    tmp_path: Path, distribution: dict[str, object], problem: str
) -> None:
    registry = tmp_path / "registry.json"
    document = {"agents": [{"id": "bad", "distribution": distribution}]}
    registry.write_text(json.dumps(document, indent=1))
    result = bridge(tmp_path, "agents", "--registry", str(registry))
    line = refused(result, naming=f"{registry}:")
    assert "agent 'bad'" in line and problem in line


# -- 16: a config named with -- CMD is still read and checked -------------------------------------


def test_a_missing_config_file_given_with_a_command_is_an_error(tmp_path: Path) -> None:
    """Before #21 --config was ignored with -- CMD: the run went on, exit 0."""
    missing = tmp_path / "missing.toml"
    store = tmp_path / "s.db"
    result = bridge(
        tmp_path, "run", "--store", str(store), "--config", str(missing), "-m", "hi", "--", *ECHO
    )
    assert "cannot read the config file" in refused(result, naming=str(missing))
    assert not store.exists()


def test_a_broken_acp_bridge_config_is_an_error_with_a_command_too(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[agents.x\n")
    result = bridge(
        tmp_path,
        "run",
        "--store",
        str(tmp_path / "s.db"),
        "-m",
        "hi",
        "--",
        *ECHO,
        env={"ACP_BRIDGE_CONFIG": str(broken)},
    )
    assert "not valid TOML" in refused(result, naming=f"{broken}:1")
    proxy = bridge(tmp_path, "proxy", "--", *ECHO, env={"ACP_BRIDGE_CONFIG": str(broken)})
    refused(proxy, naming=f"{broken}:1")


def test_a_missing_registry_given_with_a_command_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = bridge(tmp_path, "run", "--registry", str(missing), "-m", "hi", "--", *ECHO)
    assert "cannot read the registry file" in refused(result, naming=str(missing))


def test_a_good_config_given_with_a_command_changes_nothing(tmp_path: Path) -> None:
    config = agent_config(tmp_path, 'env = { MARK = "from-config" }')
    result = bridge(
        tmp_path,
        "run",
        "--store",
        str(tmp_path / "s.db"),
        "--config",
        str(config),
        "-m",
        "echo hi",
        "--",
        *ECHO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi\n"


# -- 19: the XDG rules, and a HOME that can't be used ---------------------------------------------


def test_an_empty_home_is_refused_when_the_default_store_is_needed(tmp_path: Path) -> None:
    """Before #21 HOME= put the store in /.local/state/acp-bridge (under the root directory)."""
    default = Path("/.local/state/acp-bridge/store.db")
    existed = default.exists()
    env = {"HOME": "", "XDG_STATE_HOME": ""}
    result = bridge(tmp_path, "run", "-m", "hi", "--", *ECHO, env=env)
    line = refused(result, naming="HOME is empty")
    assert "XDG_STATE_HOME" in line and "--store" in line
    assert default.exists() == existed
    listed = bridge(tmp_path, "conversations", env=env)
    refused(listed, naming="HOME is empty")
    # Not needed: an explicit store (and no named agent) works without a home.
    explicit = bridge(
        tmp_path, "run", "--store", str(tmp_path / "s.db"), "-m", "echo ok", "--", *ECHO, env=env
    )
    assert explicit.returncode == 0, explicit.stderr
    assert explicit.stdout == "ok\n"


def test_a_relative_home_is_refused_and_named(tmp_path: Path) -> None:
    result = bridge(tmp_path, "conversations", env={"HOME": "here", "XDG_STATE_HOME": ""})
    refused(result, naming="HOME is a relative path ('here')")


def test_an_empty_home_is_refused_when_the_default_config_is_needed(tmp_path: Path) -> None:
    env = {"HOME": "", "XDG_CONFIG_HOME": ""}
    result = bridge(tmp_path, "run", "--agent", "goose", "-m", "hi", env=env)
    line = refused(result, naming="HOME is empty")
    assert "XDG_CONFIG_HOME" in line and "--config" in line
    refused(bridge(tmp_path, "agents", env=env), naming="HOME is empty")


def test_relative_xdg_directories_are_ignored(tmp_path: Path) -> None:
    """The XDG Base Directory rules: a relative XDG_STATE_HOME or XDG_CONFIG_HOME is ignored
    (before #21 it was used as is, relative to wherever the command ran)."""
    home = tmp_path / "home"
    config = home / ".config" / "acp-bridge" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"[agents.x]\ncommand = {json.dumps(ECHO[0])}\nargs = {toml_list(ECHO[1:])}")
    env = {"HOME": str(home), "XDG_STATE_HOME": "state", "XDG_CONFIG_HOME": "config"}
    result = bridge(tmp_path, "run", "--agent", "x", "-m", "echo hi", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi\n"
    assert (home / ".local" / "state" / "acp-bridge" / "store.db").is_file()
    assert not (tmp_path / "state").exists()
    listed = bridge(tmp_path, "agents", "--json", env=env)
    assert json.loads(listed.stdout)["config"] == str(config)


# Not pytest.importorskip("litellm"): importing litellm here, without the agent's
# LITELLM_LOCAL_MODEL_COST_MAP, fetched its cost map from the network (three tries: 23 s seen).
@requires_litellm
def test_the_built_in_agent_refuses_an_empty_home_for_its_history(tmp_path: Path) -> None:
    """``acp-bridge agent`` keeps its history under the same state directory, by the same rule
    (one implementation)."""
    env = {"HOME": "", "XDG_STATE_HOME": ""}
    result = bridge(tmp_path, "agent", "--mock-response", "hi", env=env)
    assert result.returncode == 2, result.stderr
    assert "HOME is empty" in result.stderr and "Traceback" not in result.stderr


def test_every_default_path_follows_the_one_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acp_bridge.cli.named_agents import default_config_path
    from acp_bridge.cli.options import default_state_dir, default_store_path

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", "relative")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert default_state_dir() == tmp_path / ".local" / "state" / "acp-bridge"
    assert default_store_path() == default_state_dir() / "store.db"
    assert default_config_path() == tmp_path / "cfg" / "acp-bridge" / "config.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert default_config_path() == tmp_path / ".config" / "acp-bridge" / "config.toml"
