"""The options ``run`` and ``chat`` share: which conversation, and how its agent is supervised.
Light on purpose, like every registrar (``acp-bridge --help`` builds all the parsers).
``cli/conversation_setup.py`` reads what these define."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import (
    count,
    directory,
    identifier,
    positive_seconds,
    seconds,
    timeout_or_off,
)

__all__ = ["add_conversation_options", "add_supervision_options"]


def add_conversation_options(parser: argparse.ArgumentParser) -> None:
    """``--cwd``, ``--session-id``, ``--store``, ``--durability``, and ``--conversation`` or
    ``--resume``."""
    parser.add_argument(
        "--cwd",
        type=directory,
        metavar="DIR",
        help="the session's working directory, which must exist (default: .)",
    )
    parser.add_argument(
        "--session-id",
        type=identifier,
        metavar="ID",
        help="restore this agent session (session/load or resume); one the agent can't "
        "restore is an error (exit 3)",
    )
    parser.add_argument(
        "--store",
        metavar="PATH|URL",
        help="the store of conversations: a SQLite path or a postgresql:// URL (default: "
        "$ACP_BRIDGE_STORE, else $XDG_STATE_HOME/acp-bridge/store.db)",
    )
    parser.add_argument(
        "--durability",
        choices=("process", "power"),
        default="process",
        help="what a committed message survives: 'process' (the default) a crash or kill of "
        "the bridge; 'power' also a power loss, with one fsync per commit (slower)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--conversation",
        type=identifier,
        metavar="ID",
        help="continue the stored conversation ID (one owner process at a time: exit 2 while "
        "another process runs it)",
    )
    which.add_argument(
        "--resume",
        action="store_true",
        help="continue the most recent stored conversation of this cwd and agent command whose "
        "agent started (its queued messages go first); one "
        "owner process at a time",
    )


def add_supervision_options(parser: argparse.ArgumentParser) -> None:
    """Start-up, authentication, grace window, deadlines, restarts and capabilities."""
    parser.add_argument(
        "--startup-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long the agent gets to answer initialize before it is called not ready "
        "(default: 30); on a terminal, a progress line shows the wait",
    )
    parser.add_argument(
        "--auth-method",
        metavar="ID",
        help="call authenticate with this method id after initialize (an agent that requires "
        "authentication lists its method ids when it refuses; exit 3)",
    )
    parser.add_argument(
        "--grace",
        type=seconds,
        default=5.0,
        metavar="SECONDS",
        help="after a cancel, how long the agent gets to answer before it is replaced (default: 5)",
    )
    parser.add_argument(
        "--turn-timeout",
        type=timeout_or_off,
        metavar="SECONDS",
        help="cancel a turn that runs longer (0 = off, the default)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=timeout_or_off,
        metavar="SECONDS",
        help="cancel a turn when the agent sends nothing for this long (0 = off, the default)",
    )
    parser.add_argument(
        "--max-restarts",
        type=count,
        default=5,
        metavar="N",
        help="crash restarts allowed within 5 minutes before giving up (default: 5)",
    )
    parser.add_argument(
        "--allow-fs",
        action="store_true",
        help="let the agent read and write files inside the session roots",
    )
    parser.add_argument(
        "--allow-terminal",
        action="store_true",
        help="let the agent run commands (terminal/*) in the session cwd",
    )
