"""``acp-bridge cancel ID``: cancel a conversation's running turn, through its owner.

With no live owner nothing is running (a message the store shows ``running`` was cut by a dead
owner, and the next owner records it failed and recoverable): said so on stderr, exit 0. On a
PostgreSQL store whose owner is a live host this one cannot reach (another machine), the cancel
is asked through the database (a notification the owner acts on), exit 0.
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack
from pathlib import Path

from acp_bridge.cli.exit_codes import EXIT_OK
from acp_bridge.cli.store_open import pg_store
from acp_bridge.cli.verb_owner import (
    host_socket,
    open_owner,
    open_store,
    owner_endpoints,
    resolve_conversation,
    run_verb,
    say,
    store_path,
)

__all__ = ["cancel_command"]


def cancel_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    return run_verb("cancel", lambda: _cancel(args))


async def _cancel(args: argparse.Namespace) -> int:
    store = store_path(args)
    record = resolve_conversation(store, args.conversation_id)
    owner = owner_endpoints(store, record.id, host_socket(args, store))
    async with AsyncExitStack() as stack:
        client = await open_owner(
            stack, owner.endpoints, store, timeout_s=args.timeout, verb="cancel"
        )
        if client is None:
            if _asked_through_store(store, record.id):  # issue 23: an owner on another host
                say("cancel", f"asked the host that owns conversation {record.id} to cancel")
                return EXIT_OK
            say("cancel", f"{owner.absent_owner_text(record.id)}: nothing is running to cancel")
            return EXIT_OK
        cancelled, seq = await client.cancel(record.id)
    if cancelled:
        if seq is not None:
            print(seq, flush=True)
        say("cancel", f"cancelled message {seq} of conversation {record.id}")
    else:
        say("cancel", f"nothing was running in conversation {record.id}")
    return EXIT_OK


def _asked_through_store(store: Path, conversation_id: str) -> bool:
    """On a PostgreSQL store whose conversation a live host owns: ask that host to cancel
    (committed on return); False elsewhere."""
    with open_store(store, read_only=True) as opened:
        shared = None if opened is None else pg_store(opened)
        if shared is None or not shared.is_owned(conversation_id):
            return False
        shared.request_cancel(conversation_id)
        return True
