"""The ``run`` subcommand's arguments. Light on purpose: ``acp-bridge --help`` builds every
subcommand's parser, so nothing here imports the library."""

from __future__ import annotations

import argparse

from acp_bridge.cli.exit_codes import HELP
from acp_bridge.cli.named_agents import add_agent_options
from acp_bridge.cli.options import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OneLineParser,
    byte_count,
    count,
    directory,
    positive_seconds,
    seconds,
    timeout_or_off,
)

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    run = commands.add_parser(
        "run",
        help="run turns headless: -m TEXT (repeatable) or one message per stdin line",
        usage="acp-bridge run [OPTIONS] (--agent NAME | -- AGENT_CMD [ARGS...])",
        description=(
            "Start AGENT_CMD as a supervised ACP agent and prompt it with each message, in "
            "order, one turn each. Messages come from -m (repeatable) or, without -m, from "
            "stdin, one per line; a line read while a turn runs waits for it. Every message is "
            "stored (--store) before it is prompted, so a conversation survives a crash of the "
            "bridge itself (--resume). The agent's text goes to stdout (or NDJSON events with "
            "--json); progress and logs go to stderr."
        ),
        epilog=(
            HELP + " --json events: agent_started, session, turn_started, update, permission, "
            "turn_ended, turn_failed, agent_exited, agent_restarted, session_restored, "
            'session_replaced, agent_gave_up (each with "event" and "ts").'
        ),
    )
    run.add_argument(
        "-m",
        "--message",
        action="append",
        default=[],
        metavar="TEXT",
        help="a message to send (repeatable, sent in order); without -m, read stdin lines",
    )
    run.add_argument(
        "--cwd",
        type=directory,
        metavar="DIR",
        help="the session's working directory, which must exist (default: .)",
    )
    run.add_argument(
        "--session-id",
        metavar="ID",
        help="restore this agent session (session/load or resume); one the agent can't "
        "restore is an error (exit 3)",
    )
    run.add_argument(
        "--store",
        metavar="PATH",
        help="the SQLite store of conversations (default: $XDG_STATE_HOME/acp-bridge/store.db)",
    )
    which = run.add_mutually_exclusive_group()
    which.add_argument(
        "--conversation",
        metavar="ID",
        help="continue the stored conversation ID (one owner process at a time: exit 2 while "
        "another process runs it)",
    )
    which.add_argument(
        "--resume",
        action="store_true",
        help="continue the most recent stored conversation of this cwd and agent command whose "
        "agent started (its queue goes on with the next message never prompted); one owner "
        "process at a time",
    )
    run.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume or --conversation: send the conversation's failed recoverable "
        "messages again, in order, before the new ones",
    )
    run.add_argument(
        "--startup-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long the agent gets to answer initialize before it is called not ready "
        "(default: 30); on a terminal, a progress line shows the wait",
    )
    run.add_argument(
        "--auth-method",
        metavar="ID",
        help="call authenticate with this method id after initialize (an agent that requires "
        "authentication lists its method ids when it refuses; exit 3)",
    )
    run.add_argument(
        "--grace",
        type=seconds,
        default=5.0,
        metavar="SECONDS",
        help="after a cancel, how long the agent gets to answer before it is replaced (default: 5)",
    )
    run.add_argument(
        "--turn-timeout",
        type=timeout_or_off,
        metavar="SECONDS",
        help="cancel a turn that runs longer (0 = off, the default)",
    )
    run.add_argument(
        "--idle-timeout",
        type=timeout_or_off,
        metavar="SECONDS",
        help="cancel a turn when the agent sends nothing for this long (0 = off, the default)",
    )
    run.add_argument(
        "--max-restarts",
        type=count,
        default=5,
        metavar="N",
        help="restarts allowed within 5 minutes before giving up (default: 5)",
    )
    run.add_argument(
        "--permission",
        choices=["ask", "deny", "allow-reads", "allow-all"],
        help="how to answer the agent's permission requests (default: ask on a terminal, "
        "deny otherwise)",
    )
    run.add_argument(
        "--allow-fs",
        action="store_true",
        help="let the agent read and write files inside the session roots",
    )
    run.add_argument(
        "--allow-terminal",
        action="store_true",
        help="let the agent run commands (terminal/*) in the session cwd",
    )
    run.add_argument(
        "--max-message-bytes",
        type=byte_count,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="N",
        help="refuse a message longer than N bytes of UTF-8 (default: 16 MiB)",
    )
    run.add_argument("--json", action="store_true", help="print NDJSON events on stdout")
    run.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log to stderr, with the agent's own stderr (-vv for debug)",
    )
    add_agent_options(run)  # --agent NAME, --config, --registry, --mcp NAME=COMMAND [ARGS...]
    run.add_argument(
        "agent_cmd",
        nargs=argparse.REMAINDER,
        metavar="-- AGENT_CMD [ARGS...]",
        help="the agent command line, after --",
    )
    run.set_defaults(handler="acp_bridge.cli.run_entry:run_command")
