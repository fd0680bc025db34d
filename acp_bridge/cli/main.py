"""``acp-bridge``: argument parsing, logging to stderr, exit codes, and error rendering.

Kept light on purpose (``acp-bridge --help`` has a 150 ms budget): subcommands import the
library only when they run.

Exit codes (the contract scripts rely on) are defined once, in :mod:`.exit_codes`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Final, NoReturn

from acp_bridge.cli import (
    agent_args,
    agents_args,
    attach_args,
    cancel_args,
    chat_args,
    conversations_args,
    demo_args,
    proxy_args,
    replay_args,
    run_args,
    send_args,
    serve_args,
    status_args,
    stop_args,
    store_args,
    watch_args,
)
from acp_bridge.cli.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE, HELP
from acp_bridge.cli.options import OneLineParser, UnusableHomeError
from acp_bridge.version import __version__

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
        store_args,
        serve_args,
        attach_args,
        send_args,
        watch_args,
        cancel_args,
        stop_args,
        status_args,
    ):
        registrar.register(commands)
    return parser


_RENDERS_EVENTS: Final = frozenset({"run", "chat"})
"""Commands whose output shows every agent lifecycle event itself (as a line of text, or as a
``--json`` event): their log leaves out the records that repeat one."""


def configure_logging(verbosity: int, *, events_rendered: bool = False) -> None:
    """Log to stderr at WARNING, INFO with ``-v``, DEBUG with ``-vv``. ``events_rendered``: the
    command shows the lifecycle events itself, so the library's log twins of them (records
    carrying ``acp_event``) are left out: one line per event, never the event and then a raw
    log line with the logger's name."""
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(
        stream=sys.stderr, level=level, format="acp-bridge: %(levelname)s %(name)s: %(message)s"
    )
    if events_rendered:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_an_event_twin)


def _not_an_event_twin(record: logging.LogRecord) -> bool:
    return not hasattr(record, "acp_event")


_EXITS_AT_ONCE: Final = frozenset({"run", "agent"})
"""Commands that have closed everything they opened (agents stopped, stores released, output
written) by the time their handler returns. The ``acp-bridge`` program then exits without the
interpreter's teardown: about 17 ms of a one-shot ``run`` here, and 1.5-4 s of the built-in
agent's exit after stdin ends (tearing down litellm's modules), which clients wait for (the
official SDK waits 2 s, then terminates)."""


def entry() -> NoReturn:
    """The ``acp-bridge`` program (and ``python -m acp_bridge``): :func:`main`, then exit."""
    code = main(exit_at_once=True)
    sys.exit(code)


def main(argv: Sequence[str] | None = None, *, exit_at_once: bool = False) -> int:
    """Run the command line ``argv``; the exit code. ``exit_at_once``: the process ends here
    after a command of :data:`_EXITS_AT_ONCE` (output flushed), as the program does."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose, events_rendered=args.command in _RENDERS_EVENTS)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    module_name, _, function_name = args.handler.partition(":")
    try:
        handler: Handler = getattr(importlib.import_module(module_name), function_name)
        code = handler(parser, args)
    except UnusableHomeError as exc:  # a default path under an unusable $HOME (any command)
        sys.stderr.write(f"{parser.prog}: error: {exc}\n")
        code = EXIT_USAGE
    except KeyboardInterrupt:
        # On the way out: a repeated signal must not turn exit 130 into a death by signal.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        print("acp-bridge: interrupted", file=sys.stderr)
        # A KeyboardInterrupt that interrupted an import (the agent is spawned before the
        # library is imported) can leave CPython believing it went unhandled, and at exit it
        # then kills itself with SIGINT: status -2 instead of 130, seen in about one run in
        # ten. Exiting here, the cleanup done, keeps the contract.
        _exit_now(EXIT_INTERRUPTED)
    if exit_at_once and args.command in _EXITS_AT_ONCE:
        _exit_now(code, run_atexit=True)
    return code


def _exit_now(code: int, *, run_atexit: bool = False) -> NoReturn:
    """End the process with ``code`` now, logging and the output flushed. ``run_atexit``: the
    exit handlers registered by libraries run first (litellm's flushes, say), as they would at
    a normal exit; the slow part of that exit, tearing down every module, is what is skipped.
    Not after an interrupt, where nothing may wait."""
    if run_atexit:
        run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
        if run_exit_handlers is not None:
            run_exit_handlers()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
