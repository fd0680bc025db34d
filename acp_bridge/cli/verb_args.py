"""What the host's client verbs (``send``, ``watch``, ``cancel``, ``stop``, ``status``,
``attach``) share on the command line: ``--store`` and ``--socket``, and their exit codes.
Light on purpose, like every registrar (``acp-bridge --help`` builds every parser): nothing here
imports the library."""

from __future__ import annotations

import argparse
from typing import Final

from acp_bridge.cli.options import positive_seconds

__all__ = [
    "EXIT_CODES",
    "OWNER_TEXT",
    "STORE_ASK_TEXT",
    "add_endpoint_options",
    "add_timeout",
    "add_verbose",
]

OWNER_TEXT: Final = (
    "The conversation's owner is found in this order: the run or chat that holds it (the "
    "socket its lock file names), else the host on --socket (acp-bridge serve), else nobody."
)

STORE_ASK_TEXT: Final = (
    "On a PostgreSQL store whose owner is a live host this one cannot reach (another "
    "machine), the request is stored in the database and the owner notified; the owner acts on "
    "it (also after a lost connection) and writes its answer, which is awaited up to 10 s "
    "(progress on stderr). With no answer by then, stderr says the request is stored and the "
    "owner will act on it when reachable (exit 0)."
)

EXIT_CODES: Final = (
    "Exit codes: 0 done; 2 usage error (a bad option, an unknown conversation id, a store "
    "that cannot be read, a host that serves another store or a socket you may not use); "
    "3 the owner failed (closed the connection mid-answer, answered something that is not "
    "JSON-RPC, did not answer in time, or refused the request); 130 interrupted (SIGINT)."
)


def add_endpoint_options(parser: argparse.ArgumentParser) -> None:
    """``--store PATH`` and ``--socket PATH``."""
    parser.add_argument(
        "--store",
        metavar="PATH|URL",
        help="the store of conversations: a SQLite path or a postgresql:// URL (default: "
        "$ACP_BRIDGE_STORE, else $XDG_STATE_HOME/acp-bridge/store.db)",
    )
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help="the host's socket (default: $XDG_RUNTIME_DIR/acp-bridge/host.sock, else "
        "<store>.host/host.sock beside the store)",
    )


def add_timeout(parser: argparse.ArgumentParser) -> None:
    """``--timeout SECONDS``: how long the owner gets to answer each request."""
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long the owner gets to answer (default: 30); one that does not is reported "
        "failed (exit 3)",
    )


def add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log to stderr (-vv for debug)",
    )
