"""``acp-bridge cancel ID``: cancel a conversation's running turn, through its owner.

With no live owner nothing is running (a message the store shows ``running`` was cut by a dead
owner, and the next owner records it failed and recoverable): said so on stderr, exit 0.
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack

from acp_bridge.cli.exit_codes import EXIT_OK
from acp_bridge.cli.verb_owner import (
    host_socket,
    open_owner,
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
