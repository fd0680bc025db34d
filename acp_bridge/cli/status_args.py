"""The ``status`` subcommand's arguments (light: nothing here imports the library)."""

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
    status = commands.add_parser(
        "status",
        help="the host's conversations (agent state, pid, queue, running turn, clients)",
        usage="acp-bridge status [OPTIONS] [ID]",
        description=(
            "Show the conversations the host holds open, one line each: id, agent state, the "
            "agent's pid, queued messages (waiting, not the running one; 'N paused' when a stop "
            "holds the queue), the running message's seq, attached clients, agent. "
            "With ID (or a unique prefix of an id), that conversation, from its owner. With no "
            "owner live, what the store says, marked 'no host' (queued messages wait for the "
            "next owner). With --json, one JSON object per line: the owner's fields "
            "(conversationId, agent, agentState, pid, queueDepth, runningSeq, paused, clients, "
            "lastEvent) plus 'owner' (the owner's socket and pid, or null from the store). On a "
            "PostgreSQL store, a conversation a live host this one cannot reach owns shows the "
            "store's queue, marked 'owned by another host', and 'owner' gives that host, its "
            "pid, its tag and the age of its heartbeat, from the lease (stderr says so too). "
            + OWNER_TEXT
        ),
        epilog=EXIT_CODES,
    )
    status.add_argument(
        "conversation_id",
        nargs="?",
        type=identifier,
        metavar="ID",
        help="one conversation (default: every conversation the host holds)",
    )
    status.add_argument("--json", action="store_true", help="one JSON object per line")
    add_endpoint_options(status)
    add_timeout(status)
    add_verbose(status)
    status.set_defaults(handler="acp_bridge.cli.status_cmd:status_command")
