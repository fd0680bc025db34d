"""``acp-bridge run --mcp NAME=COMMAND [ARGS...]`` through the real process (issue #8, "What to
add" 5): the servers reach session/new and, on ``--resume``, session/load, reconciled with the
stored ones: an added server is fine, a removed one the history used is refused by name, a
removed unused one is fine. The fixture agent reports the ``mcpServers`` it received."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.test_run_named_agent import MCP_AGENT, bridge, servers_reported


def server(name: str, command: str, *args: str) -> dict[str, Any]:
    return {"name": name, "command": command, "args": list(args), "env": []}


def test_mcp_servers_reach_session_new_split_like_a_shell_line(tmp_path: Path) -> None:
    result = bridge(
        tmp_path,
        "run",
        "--store",
        str(tmp_path / "s.db"),
        "--mcp",
        "git=git-mcp --repo '/my repo'",
        "--mcp",
        "web=web-mcp",
        "-m",
        "mcp-servers",
        "--",
        *MCP_AGENT,
    )
    assert result.returncode == 0, result.stderr
    assert servers_reported(result.stdout) == [
        server("git", "git-mcp", "--repo", "/my repo"),
        server("web", "web-mcp"),
    ]


def test_a_bad_mcp_value_is_a_one_line_usage_error(tmp_path: Path) -> None:
    result = bridge(tmp_path, "run", "--mcp", "no-command-here", "-m", "hi", "--", *MCP_AGENT)
    assert result.returncode == 2
    assert "--mcp 'no-command-here': give NAME=COMMAND [ARGS...]" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_resume_reconciles_the_mcp_servers_given_now(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    agent = [*MCP_AGENT, "--history", str(tmp_path / "history.json")]  # session/load works

    def run(*args: str) -> Any:
        return bridge(tmp_path, "run", "--store", store, "--permission", "allow-all", *args)

    first = run("--mcp", "git=git-mcp", "--mcp", "web=web-mcp", "-m", "mcp-tool web", "--", *agent)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["mcp-tool web allow_once"]

    # git was never used: removing it is fine; "new" is added; session/load gets both.
    second = run(
        "--resume",
        "--json",
        "--mcp",
        "web=web-mcp",
        "--mcp",
        "new=new-mcp",
        "-m",
        "mcp-servers",
        "--",
        *agent,
    )
    assert second.returncode == 0, second.stderr
    seen = [json.loads(line) for line in second.stdout.splitlines()]
    assert [e["how"] for e in seen if e["event"] == "session"] == ["load"]
    texts = [
        e["update"]["content"]["text"]
        for e in seen
        if e["event"] == "update" and e["update"].get("sessionUpdate") == "agent_message_chunk"
    ]
    assert servers_reported("\n".join(texts)) == [
        server("web", "web-mcp"),
        server("new", "new-mcp"),
    ]

    # web was used (its tool asked for permission): removing it is refused, by name, exit 2.
    third = run("--resume", "--mcp", "new=new-mcp", "-m", "never sent", "--", *agent)
    assert third.returncode == 2
    assert "used the MCP server(s) web, which are not configured any more" in third.stderr
    assert third.stdout == ""

    # Neither an agent nor --mcp given: the conversation goes on with its stored servers.
    fourth = run("--resume", "-m", "mcp-servers")
    assert fourth.returncode == 0, fourth.stderr
    assert servers_reported(fourth.stdout) == [server("web", "web-mcp"), server("new", "new-mcp")]


def test_a_server_whose_tool_ran_without_permission_counts_as_used(tmp_path: Path) -> None:
    """Before, only permission events kept a tool call's title in the log: a read-only MCP
    tool that ran without asking left no trace, and removing its server passed."""
    store = str(tmp_path / "s.db")
    agent = [*MCP_AGENT, "--history", str(tmp_path / "history.json")]

    def run(*args: str) -> Any:
        return bridge(tmp_path, "run", "--store", store, *args)

    first = run("--mcp", "docs=docs-mcp", "-m", "mcp-call docs", "--", *agent)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["mcp-call docs done"]
    refused = run("--resume", "-m", "never sent", "--mcp", "other=other-mcp", "--", *agent)
    assert refused.returncode == 2
    assert "used the MCP server(s) docs" in refused.stderr
