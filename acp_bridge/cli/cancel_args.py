"""The ``cancel`` subcommand's arguments (light: nothing here imports the library)."""

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
    cancel = commands.add_parser(
        "cancel",
        help="cancel a conversation's running turn, through whoever owns it",
        usage="acp-bridge cancel [OPTIONS] ID",
        description=(
            "Cancel the running turn of conversation ID (or a unique prefix of its id), with "
            "the owner's grace window: its message ends cancelled and the queue goes on with "
            "the next one. Prints the cancelled message's seq on stdout; when nothing was "
            "running (or no owner is live), prints nothing and says so on stderr, exit 0. To "
            "pause the queue as well, see acp-bridge stop. " + OWNER_TEXT + " " + STORE_ASK_TEXT
        ),
        epilog=EXIT_CODES,
    )
    cancel.add_argument("conversation_id", type=identifier, metavar="ID", help="the conversation")
    add_endpoint_options(cancel)
    add_timeout(cancel)
    add_verbose(cancel)
    cancel.set_defaults(handler="acp_bridge.cli.cancel_cmd:cancel_command")
