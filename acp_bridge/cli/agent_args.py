"""The ``agent`` subcommand's arguments. Light on purpose: nothing here imports the agent,
litellm or the library (``acp-bridge --help`` builds every subcommand's parser)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser, count, seconds

__all__ = ["register"]


def _positive(text: str) -> int:
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text!r}")
    return value


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    agent = commands.add_parser(
        "agent",
        help="the built-in reference ACP agent on stdio, on any litellm model (extra: [agent])",
        usage="acp-bridge agent [--model MODEL] [--mock-response TEXT | --mock-script FILE]",
        description=(
            "Speak ACP on stdin/stdout as a coding agent backed by litellm (install with "
            "the agent extra: python -m pip install '.[agent]' in acp-bridge's checkout). "
            "Point an editor or acp-bridge at this command. "
            "The provider's API key comes from its usual environment variable (e.g. "
            "OPENAI_API_KEY, ANTHROPIC_API_KEY). Files and commands go through the client "
            "(fs/*, terminal/*) when it allows them; writes and commands ask permission first. "
            "With --mock-response or --mock-script no provider is called (offline, no key). "
            "Logs go to stderr; stdout carries protocol frames only. See docs/agent.md."
        ),
    )
    agent.add_argument(
        "--model",
        default=None,
        metavar="MODEL",
        help="the litellm model a session starts with (default: gpt-4o-mini), "
        "e.g. anthropic/claude-sonnet-4-5 or ollama/llama3",
    )
    agent.add_argument(
        "--models",
        default="",
        metavar="LIST",
        help="comma-separated models the session's model option offers besides --model",
    )
    mock = agent.add_mutually_exclusive_group()
    mock.add_argument(
        "--mock-response",
        metavar="TEXT",
        help="offline: answer every prompt with TEXT through litellm's mock_response",
    )
    mock.add_argument(
        "--mock-script",
        metavar="FILE",
        help="offline: a JSON script of replies (streaming speed, tool calls, hangs, crashes, "
        "provider errors); its format is in docs/agent.md",
    )
    agent.add_argument(
        "--history",
        metavar="PATH",
        help="the SQLite history of sessions, so session/load works across restarts "
        "(default: $XDG_STATE_HOME/acp-bridge/agent-history.db)",
    )
    agent.add_argument(
        "--max-turn-requests",
        type=_positive,
        default=25,
        metavar="N",
        help="model requests per prompt turn; then the turn ends max_turn_requests (default 25)",
    )
    agent.add_argument(
        "--max-retries",
        type=count,
        default=4,
        metavar="N",
        help="retries of a rate-limited request, with doubling backoff (default 4)",
    )
    agent.add_argument(
        "--retry-delay",
        type=seconds,
        default=0.5,
        metavar="SECONDS",
        help="the first rate-limit backoff, doubling each retry up to 8 s (default 0.5)",
    )
    agent.add_argument(
        "--mode",
        choices=("ask", "code"),
        default="code",
        help="the mode new sessions start in: ask (read-only tools) or code (default)",
    )
    agent.set_defaults(handler="acp_bridge.cli.agent_cmd:agent_command")
