"""The ``stop`` subcommand's arguments (light: nothing here imports the library)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser, identifier
from acp_bridge.cli.verb_args import (
    EXIT_CODES,
    OWNER_TEXT,
    STORE_ASK_TEXT,
    add_endpoint_options,
    add_timeout,
    add_verbose,
)

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    stop = commands.add_parser(
        "stop",
        help="cancel a conversation's running turn and pause its queue, through whoever owns it",
        usage="acp-bridge stop [OPTIONS] ID",
        description=(
            "Stop conversation ID (or a unique prefix of its id): its running turn is cancelled "
            "with the owner's grace window (its message ends cancelled) and its queue is "
            "paused: the queued messages stay queued, in the store, and nothing more is "
            "prompted until a send (acp-bridge send, a client's prompt) or a resume (chat's "
            "/resume, run --conversation ID). Prints the cancelled message's seq on stdout, "
            "if a turn ran; stderr says what happened and how many messages stay queued. With "
            "no live owner, the conversation is paused in the store, so its next owner starts "
            "nothing until a send. " + OWNER_TEXT + " " + STORE_ASK_TEXT
        ),
        epilog=EXIT_CODES,
    )
    stop.add_argument("conversation_id", type=identifier, metavar="ID", help="the conversation")
    add_endpoint_options(stop)
    add_timeout(stop)
    add_verbose(stop)
    stop.set_defaults(handler="acp_bridge.cli.stop_cmd:stop_command")
