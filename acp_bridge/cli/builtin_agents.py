"""The built-in named agents: well-known ACP agents, each pinned to the command its own docs
give (the doc is cited with each). A config entry of the same name replaces or adjusts one."""

from __future__ import annotations

from typing import Final

from acp_bridge.cli.agent_config import AgentEntry

__all__ = ["BUILTIN_AGENTS"]


BUILTIN_AGENTS: Final[tuple[AgentEntry, ...]] = (
    AgentEntry(
        "claude-agent-acp",
        "builtin",
        ("claude-agent-acp",),
        description="Claude Agent SDK adapter (npm @agentclientprotocol/claude-agent-acp)",
        # bin "claude-agent-acp" in its package.json
        origin="https://github.com/agentclientprotocol/claude-agent-acp",
    ),
    AgentEntry(
        "claude-code-acp",
        "builtin",
        ("claude-code-acp",),
        description="Zed's earlier Claude Code adapter (npm @zed-industries/claude-code-acp)",
        # README: "npm install -g @zed-industries/claude-code-acp", then "claude-code-acp"
        origin="https://github.com/zed-industries/claude-code-acp",
    ),
    AgentEntry(
        "codex-acp",
        "builtin",
        ("codex-acp",),
        description="Codex adapter (release binary, or npm @zed-industries/codex-acp)",
        # README: "OPENAI_API_KEY=sk-... codex-acp"
        origin="https://github.com/zed-industries/codex-acp",
    ),
    AgentEntry(
        "gemini",
        "builtin",
        ("gemini", "--acp"),
        description="Gemini CLI in ACP mode (older releases: gemini --experimental-acp)",
        # "To start Gemini CLI in ACP mode, use the --acp flag: gemini --acp"
        origin="https://geminicli.com/docs/cli/acp-mode/",
    ),
    AgentEntry(
        "fast-agent",
        "builtin",
        ("uvx", "fast-agent-acp"),
        description="fast-agent's ACP entry point, run with uvx",
        # "Simply run: uvx fast-agent-acp"
        origin="https://pypi.org/project/fast-agent-acp/",
    ),
    AgentEntry(
        "goose",
        "builtin",
        ("goose", "acp"),
        description="goose (Block) as an ACP agent",
        # "The client runs the goose acp command to initialize the connection"
        origin="https://block.github.io/goose/docs/guides/acp-clients",
    ),
    AgentEntry(
        "opencode",
        "builtin",
        ("opencode", "acp"),
        description="OpenCode as an ACP agent",
        # "Configure your ACP client to launch opencode acp"
        origin="https://opencode.ai/docs/cli/acp/",
    ),
    AgentEntry(
        "kimi",
        "builtin",
        ("kimi", "acp"),
        description="Kimi Code CLI's multi-session ACP server",
        # "The kimi acp command starts a multi-session ACP server"
        origin="https://moonshotai.github.io/kimi-cli/en/reference/kimi-acp.html",
    ),
)
