"""The ``demo`` subcommand's arguments. Light on purpose (imports nothing of the library)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="an offline walk through acp-bridge on its built-in agent (extra: [agent])",
        description=(
            "Run the built-in reference agent (acp-bridge agent --mock-script) under a "
            "supervised conversation and narrate each step in one line on stderr: a streamed "
            "answer, a tool call with a permission decision, a message typed during a turn "
            "being queued, a cancel drained within the grace window, a crash of the agent and "
            "its restart with the session restored, and the usage summary. Offline, no API "
            "keys, temporary directories only; about half a minute. Exit 0 only if every step "
            "behaved."
        ),
    )
    demo.set_defaults(handler="acp_bridge.cli.demo:demo_command")
