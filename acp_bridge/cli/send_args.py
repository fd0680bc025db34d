"""The ``send`` subcommand's arguments (light: nothing here imports the library)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser, identifier
from acp_bridge.cli.verb_args import (
    EXIT_CODES,
    OWNER_TEXT,
    add_endpoint_options,
    add_timeout,
    add_verbose,
)

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    send = commands.add_parser(
        "send",
        help="queue a message into a conversation, through whoever owns it",
        usage="acp-bridge send [OPTIONS] ID -m TEXT [-m TEXT ...]",
        description=(
            "Queue messages into conversation ID (or a unique prefix of its id), in order, one "
            "turn each, through its owner: the message is committed to the conversation's "
            "durable queue and its seq printed on stdout, one line per message; send does not "
            "wait for the turn (acp-bridge watch ID follows it). With no live owner, the "
            "message is committed to the store directly and said so on stderr: it runs when "
            "the conversation is next opened (acp-bridge run --conversation ID, or a host). "
            + OWNER_TEXT
        ),
        epilog=EXIT_CODES,
    )
    send.add_argument("conversation_id", type=identifier, metavar="ID", help="the conversation")
    send.add_argument(
        "-m",
        "--message",
        action="append",
        required=True,
        metavar="TEXT",
        help="the message (repeatable: queued in order)",
    )
    how = send.add_mutually_exclusive_group()
    how.add_argument(
        "--interrupt",
        action="store_true",
        help="cancel the running turn (its message ends superseded) and run this message next",
    )
    how.add_argument(
        "--steer",
        action="store_true",
        help="join the running turn where the agent takes it (steering), else go next in the "
        "queue; with no live owner it is queued, and said so",
    )
    send.add_argument(
        "--label",
        metavar="TEXT",
        help="how other clients see the sender (default: the host's choice)",
    )
    add_endpoint_options(send)
    add_timeout(send)
    add_verbose(send)
    send.set_defaults(handler="acp_bridge.cli.send_cmd:send_command")
