"""The arguments of ``conversations``, ``show`` and ``prune``: the stored conversations, one of
them as a transcript, and cleanup. Light on purpose: ``acp-bridge --help`` builds every
subcommand's parser, so nothing here imports the library."""

from __future__ import annotations

import argparse
import math
import re
from typing import Final

from acp_bridge.cli.options import OneLineParser, count

__all__ = ["duration", "register"]

_HANDLERS: Final = "acp_bridge.cli.conversations_cmd"
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_STORE_HELP: Final = (
    "the store of conversations: a SQLite path or a postgresql:// URL (default: "
    "$ACP_BRIDGE_STORE, else $XDG_STATE_HOME/acp-bridge/store.db)"
)
_EXIT_CODES: Final = (
    "Exit codes: 0 ok; 2 usage error (a bad option, an unknown or ambiguous conversation id, "
    "a store that cannot be read)."
)


def duration(text: str) -> float:
    """A duration: a number with an optional unit s, m, h, d or w (``30d``, ``12h``, ``90``)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a number with s, m, h, d or w, e.g. 30d)"
        )
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}")
    return value


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    listing = commands.add_parser(
        "conversations",
        help="list the stored conversations (id, last activity, messages by state, cwd, agent)",
        usage="acp-bridge conversations [--json] [--store PATH]",
        description=(
            "List the conversations in the store, most recently active first: id, last "
            "activity, how many messages are in each state, working directory and agent "
            "command. With --json, one JSON object per line."
        ),
        epilog=_EXIT_CODES,
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.add_argument("--store", metavar="PATH|URL", help=_STORE_HELP)
    listing.set_defaults(handler=f"{_HANDLERS}:conversations_command")

    show = commands.add_parser(
        "show",
        help="show one stored conversation as a transcript (prompts, final states, replies)",
        usage="acp-bridge show [--json] [--store PATH] ID",
        description=(
            "Print one conversation: each message with its final state (and stop reason or "
            "error), the prompt, the agent's reply text, and what it spent; then the "
            "conversation's usage. ID may be a unique prefix of the id. With --json, one JSON "
            "object."
        ),
        epilog=_EXIT_CODES,
    )
    show.add_argument("conversation_id", metavar="ID", help="the conversation (or a prefix)")
    show.add_argument("--json", action="store_true", help="one JSON object")
    show.add_argument("--store", metavar="PATH|URL", help=_STORE_HELP)
    show.set_defaults(handler=f"{_HANDLERS}:show_command")

    prune = commands.add_parser(
        "prune",
        help="remove old stored conversations (never one a running process owns)",
        usage="acp-bridge prune (--older-than DURATION | --keep N) [--dry-run] [--store PATH]",
        description=(
            "Remove conversations, with their messages and events, that were last active "
            "longer ago than --older-than, and/or that are not among the --keep N most "
            "recently active (both given: only those matching both). A conversation that a "
            "running acp-bridge process owns is skipped and named on stderr. The ids removed "
            "are printed on stdout, one per line."
        ),
        epilog=_EXIT_CODES,
    )
    prune.add_argument(
        "--older-than",
        type=duration,
        metavar="DURATION",
        help="last active longer ago than this (e.g. 30d, 12h, 90m, 45s)",
    )
    prune.add_argument(
        "--keep", type=count, metavar="N", help="keep the N most recently active conversations"
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="print what would be removed, remove nothing"
    )
    prune.add_argument("--store", metavar="PATH|URL", help=_STORE_HELP)
    prune.set_defaults(handler=f"{_HANDLERS}:prune_command")
