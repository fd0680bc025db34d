"""The named agents' config, registry and --mcp parsing (pure): values, and errors that name
the file, the line and the fix."""

from __future__ import annotations

import json

import pytest

from acp_bridge.cli.agent_config import (
    AgentEntry,
    ConfigError,
    merge_entry,
    parse_config,
    parse_mcp_option,
)
from acp_bridge.cli.agent_registry import parse_registry
from acp_bridge.cli.builtin_agents import BUILTIN_AGENTS

GOOD = """\
registry = "reg.json"

[agents.one]
command = "one-agent"
args = ["--acp"]
env = { TOKEN = "t" }

[agents.one.defaults]
grace = 2.5
turn-timeout = 0
permission = "allow-reads"
allow_fs = true

[[agents.one.mcp_servers]]
name = "git"
command = "git-mcp"

[[agents.one.mcp_servers]]
name = "web"
command = "web-mcp"
args = ["--port", "0"]
env = { LOG = "1" }
"""


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "/etc/c.toml")
    return caught.value


def test_a_good_config_parses_into_an_agent_with_acp_mcp_servers() -> None:
    config = parse_config(GOOD, "/etc/c.toml")
    assert config.registry == "reg.json"
    one = config.agents["one"]
    assert (one.source, one.argv, dict(one.env)) == (
        "config",
        ("one-agent", "--acp"),
        {"TOKEN": "t"},
    )
    assert dict(one.defaults) == {
        "grace": 2.5,
        "turn_timeout": 0,
        "permission": "allow-reads",
        "allow_fs": True,
    }
    assert one.mcp_servers == (
        {"name": "git", "command": "git-mcp", "args": [], "env": []},
        {
            "name": "web",
            "command": "web-mcp",
            "args": ["--port", "0"],
            "env": [{"name": "LOG", "value": "1"}],
        },
    )
    assert one.origin == "/etc/c.toml:3"


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("[agents.a]\ncommand = \n", 2, "not valid TOML"),
        ("colour = 1\n", 1, "unknown top-level key 'colour'"),
        ("[agents.a]\ncommand = 'a'\nflavour = 1\n", 3, "unknown key 'flavour'"),
        ("[agents.a]\ncommand = 3\n", 2, "command must be a program name"),
        ("[agents.a]\ncommand = 'a'\nargs = 'x'\n", 3, "args must be a list of strings"),
        ("[agents.a]\nargs = ['x']\n", 2, "has args but no command"),
        ("[agents.a]\ncommand = 'a'\nenv = { A = 1 }\n", 3, "env must map names to string"),
        ("[agents.a]\ncommand = 'a'\n[agents.a.defaults]\ngrace = -1\n", 4, "grace = -1 must be"),
        ("[agents.a]\ncommand = 'a'\ndefaults = { max_restarts = 1.5 }\n", 3, "whole number"),
        ("[agents.a]\ncommand = 'a'\n[agents.a.defaults]\npermission = 'yes'\n", 4, "one of ask"),
        ("[agents.a]\ncommand = 'a'\n[agents.a.defaults]\nspeed = 3\n", 4, "unknown default"),
        ("[agents.a]\ncommand = 'a'\n[agents.a.defaults]\nallow_fs = 'yes'\n", 4, "true or false"),
    ],
)
def test_errors_name_the_file_and_the_line(text: str, line: int, says: str) -> None:
    error = error_of(text)
    assert str(error).startswith(f"/etc/c.toml:{line}: ")
    assert says in str(error)
    assert "; " in str(error)  # ... and the fix


def test_an_mcp_server_error_points_at_its_own_table() -> None:
    text = GOOD.replace('command = "web-mcp"\n', "")
    error = error_of(text)
    second_table = text.splitlines().index("[[agents.one.mcp_servers]]", 16) + 1
    assert str(error) == (
        f"/etc/c.toml:{second_table}: [agents.one] MCP server 'web' has no command; "
        'add command = "..."'
    )
    dup = error_of(GOOD.replace('name = "web"', 'name = "git"'))
    assert "two MCP servers are named 'git'" in str(dup)


@pytest.mark.parametrize(
    ("value", "server"),
    [
        ("fs=mcp-fs /tmp", {"name": "fs", "command": "mcp-fs", "args": ["/tmp"], "env": []}),
        (
            "fs=mcp-fs --root '/my dir' \"a b\"",
            {"name": "fs", "command": "mcp-fs", "args": ["--root", "/my dir", "a b"], "env": []},
        ),
        ("x.y-1=cmd", {"name": "x.y-1", "command": "cmd", "args": [], "env": []}),
    ],
)
def test_mcp_values_split_like_a_shell_line(value: str, server: dict[str, object]) -> None:
    assert parse_mcp_option(value) == server


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("nocommand", "give NAME=COMMAND"),
        ("=cmd", "give NAME=COMMAND"),
        ("a b=cmd", "give NAME=COMMAND"),
        ("fs=", "no command after fs="),
        ("fs=cmd 'open", "No closing quotation"),
    ],
)
def test_bad_mcp_values_say_what_to_write(value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_mcp_option(value)


def test_a_config_entry_without_command_adjusts_the_one_below() -> None:
    lower = AgentEntry(
        "g", "builtin", ("g", "--acp"), {"A": "1"}, ({"name": "s", "command": "old"},), {"grace": 1}
    )
    upper = AgentEntry(
        "g", "config", (), {"B": "2"}, ({"name": "s", "command": "new"},), {"allow_fs": True}
    )
    merged = merge_entry(lower, upper)
    assert merged.argv == ("g", "--acp") and merged.source == "builtin+config"
    assert dict(merged.env) == {"A": "1", "B": "2"}
    assert merged.mcp_servers == ({"name": "s", "command": "new"},)
    assert dict(merged.defaults) == {"grace": 1, "allow_fs": True}
    replacing = AgentEntry("g", "config", ("other",))
    assert merge_entry(lower, replacing) is replacing


def test_builtins_have_unique_names_a_command_and_a_cited_doc() -> None:
    names = [entry.name for entry in BUILTIN_AGENTS]
    assert len(names) == len(set(names))
    for wanted in ("claude-agent-acp", "codex-acp", "gemini", "fast-agent", "goose", "opencode"):
        assert wanted in names
    assert all(entry.argv and entry.origin.startswith("https://") for entry in BUILTIN_AGENTS)


REGISTRY = {
    "version": "1.0.0",
    "agents": [
        {
            "id": "n",
            "distribution": {"npx": {"package": "@a/n@1", "args": ["--acp"], "env": {"K": "v"}}},
        },
        {"id": "u", "distribution": {"uvx": {"package": "u==2"}}},
        {
            "id": "b",
            "distribution": {
                "binary": {
                    "linux-x86_64": {
                        "archive": "https://x/b.tgz",
                        "cmd": "./dist/b-agent",
                        "args": ["acp"],
                    }
                },
                "npx": {"package": "b"},
            },
        },
    ],
}


def test_registry_distributions_become_commands_nothing_fetched() -> None:
    text = json.dumps(REGISTRY, indent=2)
    nothing = parse_registry(text, "r.json", "linux-x86_64", lambda program: None)
    assert nothing["n"].argv == ("npx", "-y", "@a/n@1", "--acp") and dict(nothing["n"].env) == {
        "K": "v"
    }
    assert nothing["u"].argv == ("uvx", "u==2")
    assert nothing["b"].argv == ("npx", "-y", "b")  # nothing installed: a launcher first
    installed = parse_registry(
        text, "r.json", "linux-x86_64", lambda p: p if p == "b-agent" else None
    )
    assert installed["b"].argv == ("b-agent", "acp")
    assert all(entry.source == "registry" for entry in installed.values())


def test_registry_errors_name_the_line_of_the_agent() -> None:
    bad = {
        "agents": [
            {"id": "ok", "distribution": {"uvx": {"package": "ok"}}},
            {
                "id": "mac-only",
                "distribution": {"binary": {"darwin-aarch64": {"archive": "a", "cmd": "m"}}},
            },
        ]
    }
    text = json.dumps(bad, indent=2)
    with pytest.raises(ConfigError) as caught:
        parse_registry(text, "r.json", "linux-x86_64", lambda p: None)
    line = text.splitlines().index('      "id": "mac-only",') + 1
    assert str(caught.value).startswith(
        f"r.json:{line}: agent 'mac-only' has no npx, uvx or linux-x86_64"
    )
    with pytest.raises(ConfigError, match=r"r.json:1: not valid JSON"):
        parse_registry("{nope", "r.json", "linux-x86_64", lambda p: None)
