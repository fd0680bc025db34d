"""``acp-bridge store copy SRC DST``: conversations from one store to another, SQLite to
PostgreSQL and back.

Each conversation is read from SRC while this process owns it there (the lock file beside a
SQLite store, the lease in a PostgreSQL one), so no live owner changes it mid-copy; one owned by
a live process is skipped (exit 1). It is written into DST in one transaction
(:meth:`~acp_bridge.conversation.store_api.Store.import_conversation`): its messages in their
states (a message left ``running`` by a crash stays so, and its next owner fails it,
recoverable, as after any crash), its event log in order. A conversation DST already holds is
never overwritten: it is skipped and named, which makes the copy idempotent. SRC is not changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from acp_bridge.cli.exit_codes import EXIT_OK, EXIT_USAGE
from acp_bridge.cli.store_open import is_postgres_url, open_store
from acp_bridge.conversation.store_api import Store
from acp_bridge.errors import QueueStoreError, UnsafeFileError
from acp_bridge.host.owner import ConversationBusyError, conversation_owner

__all__ = ["copy_command"]

_PROG = "acp-bridge store copy"
EXIT_SKIPPED = 1


def copy_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        if not is_postgres_url(args.source) and not Path(args.source).exists():
            raise QueueStoreError(f"{args.source}: no such store")
        source = open_store(args.source)
    except (OSError, QueueStoreError) as exc:
        _say(str(exc))
        return EXIT_USAGE
    try:
        try:
            destination = open_store(args.destination)
        except (OSError, QueueStoreError) as exc:
            _say(str(exc))
            return EXIT_USAGE
        try:
            return _copy(source, Path(args.source), destination, args.conversation)
        except QueueStoreError as exc:
            _say(str(exc))
            return EXIT_USAGE
        finally:
            destination.close()
    finally:
        source.close()


def _copy(source: Store, source_path: Path, destination: Store, wanted: str | None) -> int:
    if wanted is None:
        ids = [record.id for record in source.list_conversations()]
    else:
        found = source.find_conversations(wanted)
        if len(found) != 1:
            what = "no conversation" if not found else "more than one conversation"
            _say(f"{source.path} has {what} {wanted!r}")
            return EXIT_USAGE
        ids = found
    copied = present = busy = 0
    for conversation_id in reversed(ids):  # the oldest first
        owner = conversation_owner(source, source_path, conversation_id)
        try:
            owner.acquire()
        except (ConversationBusyError, UnsafeFileError, OSError) as exc:
            _say(f"skipped {conversation_id}: {exc}")
            busy += 1
            continue
        try:
            record = source.get_conversation(conversation_id)
            if record is None:
                continue  # pruned meanwhile
            messages = source.messages(conversation_id)
            events = source.events(conversation_id)
            if destination.import_conversation(record, messages, events):
                copied += 1
            else:
                present += 1
                _say(f"{conversation_id} is in {destination.path} already: not overwritten")
        finally:
            owner.release()
    print(
        f"{copied} conversation(s) copied from {source.path} to {destination.path}"
        + (f", {present} there already" if present else "")
        + (f", {busy} skipped (owned by a live process)" if busy else "")
    )
    return EXIT_SKIPPED if busy else EXIT_OK


def _say(text: str) -> None:
    sys.stderr.write(f"{_PROG}: {text}\n")
