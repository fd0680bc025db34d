"""The ``watch`` subcommand's arguments (light: nothing here imports the library)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser, count, identifier
from acp_bridge.cli.verb_args import (
    EXIT_CODES,
    OWNER_TEXT,
    add_endpoint_options,
    add_timeout,
    add_verbose,
)

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    watch = commands.add_parser(
        "watch",
        help="follow a conversation live, after replaying its stored events",
        usage="acp-bridge watch [OPTIONS] ID",
        description=(
            "Print the events of conversation ID (or a unique prefix of its id): first the "
            "stored ones after --from (all of them without it), then live ones as they happen, "
            "never one twice and none missed. Plain output renders them as acp-bridge run does "
            "(the agent's text on stdout); --json prints one event per line as run --json "
            "does, each with its 'cursor'. Ends (exit 0) when the conversation is closed, when "
            "its owner goes away, or when no owner is live (after the stored events); exit 3 "
            "when the owner cuts it off (too far behind); Ctrl-C ends it (exit 130). On "
            "the way out, stderr names the last cursor: watch again with --from CURSOR to "
            "continue where this one stopped. " + OWNER_TEXT
        ),
        epilog=EXIT_CODES,
    )
    watch.add_argument("conversation_id", type=identifier, metavar="ID", help="the conversation")
    watch.add_argument("--json", action="store_true", help="NDJSON events on stdout")
    watch.add_argument(
        "--from",
        dest="from_cursor",
        type=count,
        metavar="CURSOR",
        help="only the events after this cursor (as a previous watch named it)",
    )
    add_endpoint_options(watch)
    add_timeout(watch)
    add_verbose(watch)
    watch.set_defaults(handler="acp_bridge.cli.watch_cmd:watch_command")
