"""``acp-bridge``: argument parsing, logging to stderr, exit codes, and error rendering.

Kept light on purpose (``acp-bridge --help`` has a 150 ms budget): subcommands import the
library only when they run.

Exit codes (the contract scripts rely on): 0 every turn ended; 2 usage error; 3 the agent could
not be started or initialized; 4 a turn failed and could not be recovered; 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from acp_bridge import __version__

__all__ = ["main"]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_AGENT_FAILED = 3
EXIT_TURN_FAILED = 4
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-bridge",
        description=(
            "A supervising bridge between ACP clients and ACP agents. Logs and progress go to "
            "stderr; stdout carries only results."
        ),
        epilog=(
            "Exit codes: 0 ok; 2 usage error; 3 the agent could not be started or initialized; "
            "4 a turn failed and could not be recovered; 130 interrupted."
        ),
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
    return parser


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
    except KeyboardInterrupt:
        print("acp-bridge: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    parser.error(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
