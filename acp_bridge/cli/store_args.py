"""The ``store`` subcommand's arguments (light: nothing here imports the library or psycopg)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser

__all__ = ["STORE_ENV", "register"]

STORE_ENV = "ACP_BRIDGE_STORE"
"""The environment variable naming the store when ``--store`` is not given."""


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    store = commands.add_parser(
        "store",
        help="manage the conversations store (migrate its schema, copy conversations)",
        usage="acp-bridge store {migrate,copy} ...",
        description="Manage the store of conversations: SQLite (a path) or PostgreSQL (a URL).",
    )
    actions = store.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    migrate = actions.add_parser(
        "migrate",
        help="create or upgrade the store's schema (idempotent)",
        usage="acp-bridge store migrate [--store PATH|URL]",
        description=(
            "Create the store's tables, or upgrade them to this version's schema, in one "
            "transaction; running it again changes nothing. A store migrated by a newer "
            "acp-bridge is refused, never downgraded. For PostgreSQL, hosts sharing the "
            "database also migrate when they open it; run this once with a role allowed to "
            "create tables, and the hosts can run with fewer privileges (docs/postgres.md). A "
            "SQLite store is migrated (and created, 0600) when it is opened; this does that now."
        ),
        epilog=(
            f"The store: --store, else ${STORE_ENV}, else the default SQLite store "
            "($XDG_STATE_HOME/acp-bridge/store.db). A PostgreSQL URL is postgresql://USER@HOST/DB; "
            "keep the password out of it (the command line is visible to every user in ps): "
            "libpq reads it from PGPASSFILE (~/.pgpass) or PGPASSWORD. Passwords are never "
            "printed. Exit codes: 0 migrated or already current; 2 the store was refused or "
            "unreachable (the message says why)."
        ),
    )
    migrate.add_argument(
        "--store",
        metavar="PATH|URL",
        help=f"a SQLite path or a postgresql:// URL (default: ${STORE_ENV}, else the SQLite store)",
    )
    migrate.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log to stderr (-vv for debug)",
    )
    migrate.set_defaults(handler="acp_bridge.cli.store_cmd:migrate_command")

    copy = actions.add_parser(
        "copy",
        help="copy conversations from one store to another (SQLite <-> PostgreSQL)",
        usage="acp-bridge store copy [--conversation ID] SRC DST",
        description=(
            "Copy every conversation of the store SRC (or only --conversation ID) into the "
            "store DST, each as it is: its messages in their states, with their replies and "
            "usage, and its event log in order. Each conversation is copied in one "
            "transaction. A conversation DST already holds is never overwritten: it is "
            "skipped and named, so running the copy again copies only what is new. A "
            "conversation owned by a live process (a run, a chat, a host) is skipped too: "
            "copy it once that owner is done. SRC is not changed."
        ),
        epilog=(
            "SRC and DST are SQLite paths or postgresql:// URLs (keep passwords out of them: "
            "see store migrate --help). DST is created (SQLite) or migrated (PostgreSQL) if "
            "needed. Exit codes: 0 every conversation asked for is in DST (copied now or "
            "before); 1 some were skipped because a live owner holds them; 2 a store was "
            "refused or unreachable, or --conversation names none."
        ),
    )
    copy.add_argument("source", metavar="SRC", help="the store to copy from")
    copy.add_argument("destination", metavar="DST", help="the store to copy into")
    copy.add_argument(
        "--conversation", metavar="ID", help="copy only this conversation (an id or its prefix)"
    )
    copy.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log to stderr (-vv for debug)",
    )
    copy.set_defaults(handler="acp_bridge.cli.store_copy:copy_command")
