"""``acp-bridge``: argument parsing, logging to stderr, exit codes, and error rendering.

Kept light on purpose (``acp-bridge --help`` has a 150 ms budget): subcommands import the
library only when they run.

Exit codes (the contract scripts rely on) are defined once, in :mod:`.exit_codes`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from acp_bridge import __version__
from acp_bridge.cli.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE, HELP
from acp_bridge.cli.options import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OneLineParser,
    byte_count,
    count,
    directory,
    seconds,
    timeout_or_off,
)

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="acp-bridge",
        description=(
            "A supervising bridge between ACP clients and ACP agents. Logs and progress go to "
            "stderr; stdout carries only results."
        ),
        epilog=HELP,
    )
    parser.add_argument("--version", action="version", version=f"acp-bridge {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log to stderr (-vv for debug)"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run an offline demonstration (interim: drives the repository's fixture echo agent)",
        description=(
            "Start the fixture echo agent from this repository's fixtures/agents/, initialize "
            "it, open a session, stream one prompt's reply to stdout, then cancel a second "
            "prompt and show that the turn closes as cancelled. Offline; no API keys. "
            "Interim: the built-in reference agent replaces the fixture in a later release."
        ),
    )
    demo.add_argument(
        "--agent-script",
        metavar="PATH",
        help="the echo agent script to drive (default: fixtures/agents/echo_agent.py)",
    )
    add_run_parser(commands)
    return parser


def add_run_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    run = commands.add_parser(
        "run",
        help="run turns headless: -m TEXT (repeatable) or one message per stdin line",
        usage="acp-bridge run [OPTIONS] -- AGENT_CMD [ARGS...]",
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
    run.add_argument(
        "agent_cmd",
        nargs=argparse.REMAINDER,
        metavar="-- AGENT_CMD [ARGS...]",
        help="the agent command line, after --",
    )


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(
        stream=sys.stderr, level=level, format="acp-bridge: %(levelname)s %(name)s: %(message)s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        if args.command == "demo":
            from acp_bridge.cli.demo import run_demo

            return run_demo(args.agent_script)
        if args.command == "run":
            from acp_bridge.cli.run import run_command

            return run_command(parser, args)
    except KeyboardInterrupt:
        print("acp-bridge: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    parser.error(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
