"""The ``agents`` subcommand's arguments. Light on purpose: ``acp-bridge --help`` builds every
subcommand's parser, so nothing here imports the library."""

from __future__ import annotations

import argparse

from acp_bridge.cli.named_agents import add_config_options
from acp_bridge.cli.options import OneLineParser

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    agents = commands.add_parser(
        "agents",
        help="list the named agents (--agent NAME) and whether each command is installed",
        description=(
            "List the agents --agent NAME can start: the built-in ones (well-known ACP agents, "
            "each pinned to the command its docs give), the ones of a registry.json file "
            "(--registry, or registry = \"FILE\" in the config) and the config file's (--config, "
            "else $ACP_BRIDGE_CONFIG, else the user config dir), later ones overriding earlier "
            "ones of the same name. For each: its source, its command, and whether that command "
            "is found (on PATH, or as a path). See docs/agents.md for the config format."
        ),
        epilog="Exit codes: 0 listed; 2 usage or config error.",
    )
    add_config_options(agents)
    agents.add_argument(
        "--json", action="store_true", help="print one JSON document instead of a table"
    )
    agents.set_defaults(handler="acp_bridge.cli.agents_cmd:agents_command")
