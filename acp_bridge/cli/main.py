"""``acp-bridge``: argument parsing, logging to stderr, exit codes, and error rendering.

Kept light on purpose (``acp-bridge --help`` has a 150 ms budget): subcommands import the
library only when they run.

Exit codes (the contract scripts rely on) are defined once, in :mod:`.exit_codes`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from acp_bridge import __version__
from acp_bridge.cli import (
    agent_args,
    agents_args,
    chat_args,
    conversations_args,
    demo_args,
    proxy_args,
    replay_args,
    run_args,
)
from acp_bridge.cli.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE, HELP
from acp_bridge.cli.options import OneLineParser

__all__ = ["main"]

Handler = Callable[[argparse.ArgumentParser, argparse.Namespace], int]
"""A subcommand's entry point: the top-level parser (for usage errors) and the parsed args."""


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
    # Each subcommand registers its arguments from a light module and names its handler as
    # "module:function", imported only when that subcommand runs.
    for registrar in (
        run_args,
        chat_args,
        agents_args,
        agent_args,
        demo_args,
        proxy_args,
        replay_args,
        conversations_args,
    ):
        registrar.register(commands)
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
    module_name, _, function_name = args.handler.partition(":")
    try:
        handler: Handler = getattr(importlib.import_module(module_name), function_name)
        return handler(parser, args)
    except KeyboardInterrupt:
        # On the way out: a repeated signal must not turn exit 130 into a death by signal.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        print("acp-bridge: interrupted", file=sys.stderr)
        _exit_interrupted()


def _exit_interrupted() -> NoReturn:
    """Exit 130 now, the cleanup above done. A KeyboardInterrupt that interrupted an import
    (the agent is spawned before the library is imported) can leave CPython believing it went
    unhandled, and at exit it then kills itself with SIGINT: status -2 instead of 130, seen in
    about one run in ten. Exiting here, with the output flushed, keeps the contract."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
