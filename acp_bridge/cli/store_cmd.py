"""``acp-bridge store migrate``: create or upgrade the store's schema, SQLite or PostgreSQL.

PostgreSQL needs the ``postgres`` extra (psycopg), imported only here and only for a
``postgresql://`` store. No password is ever printed: every line names the store by its
redacted URL (:func:`acp_bridge.pgstore.url.redact`).
"""

from __future__ import annotations

import argparse
import os
import sys

from acp_bridge.cli.exit_codes import EXIT_OK, EXIT_USAGE
from acp_bridge.cli.options import default_store_path
from acp_bridge.cli.store_args import STORE_ENV
from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.url import is_postgres_url, password_of, redact

__all__ = ["migrate_command"]

_PROG = "acp-bridge store migrate"


def migrate_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    store = args.store or os.environ.get(STORE_ENV) or str(default_store_path())
    if is_postgres_url(store):
        if args.store and password_of(args.store):
            _say(
                "warning: the password in --store is visible to other users in ps; put it in "
                "PGPASSFILE (~/.pgpass) or PGPASSWORD, or the URL in $" + STORE_ENV
            )
        return _migrate_postgres(store)
    return _migrate_sqlite(store)


def _migrate_postgres(url: str) -> int:
    try:
        from acp_bridge.pgstore.connection import PgConnection
        from acp_bridge.pgstore.schema import migrate, version_of
    except ImportError as exc:
        _say(
            f"a PostgreSQL store needs psycopg ({exc.name} is missing): "
            "pip install 'acp-supervisor[postgres]'"
        )
        return EXIT_USAGE
    try:
        with PgConnection.open(url) as conn:
            before = version_of(conn)
            after = migrate(conn)
    except QueueStoreError as exc:
        _say(str(exc))
        return EXIT_USAGE
    _report(redact(url), before, after)
    return EXIT_OK


def _migrate_sqlite(path: str) -> int:
    from acp_bridge.conversation.schema import LATEST_VERSION
    from acp_bridge.conversation.store import QueueStore

    try:
        with QueueStore.open(path):  # creates (0600) and migrates on open
            pass
    except QueueStoreError as exc:
        _say(str(exc))
        return EXIT_USAGE
    print(f"{path}: SQLite store at schema version {LATEST_VERSION} (migrated when opened)")
    return EXIT_OK


def _report(name: str, before: int, after: int) -> None:
    if before == after:
        print(f"{name}: already at schema version {after}")
    else:
        print(f"{name}: migrated from schema version {before} to {after}")


def _say(text: str) -> None:
    sys.stderr.write(f"{_PROG}: {text}\n")
