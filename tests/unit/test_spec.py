"""AgentSpec: names and environments."""

from __future__ import annotations

from acp_bridge.process.spec import AgentSpec, default_name


def test_agent_names_look_through_launchers() -> None:
    assert default_name(["/usr/bin/python3", "-u", "/x/agents/echo_agent.py"]) == "echo_agent"
    assert default_name(["npx", "-y", "@zed-industries/claude-code-acp@1.2"]) == "claude-code-acp"
    assert default_name(["python", "-m", "my_agent"]) == "my_agent"
    assert default_name(["gemini", "--experimental-acp"]) == "gemini"
    assert AgentSpec(["codex-acp"]).name == "codex-acp"
    assert AgentSpec(["codex-acp"], name="codex").name == "codex"
