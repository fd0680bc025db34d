"""``acp-bridge send ID -m TEXT``: queue messages into a conversation, through its owner.

Through the owner (a run or chat that serves an endpoint, else the host), each message is
``_acp_bridge/send``: committed to the durable queue by the owner, which answers its seq. With no
live owner, the message is committed to the store here (``QueueStore.add_message``, the same
call the owner's ``Conversation.send`` makes), queued: the next owner of the conversation runs
it (``run --conversation ID`` and ``run --resume`` prompt the queued messages first). Nothing is
ever sent twice: a message the owner did not confirm is not committed here as well (the failure
is reported instead, and the user decides).

stdout: one seq per message, in order. stderr: what happened when no owner took it.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

from acp_bridge.cli.exit_codes import EXIT_OK
from acp_bridge.cli.verb_owner import (
    Owner,
    VerbFailed,
    host_socket,
    open_owner,
    open_store,
    owner_endpoints,
    resolve_conversation,
    run_verb,
    say,
    store_path,
)
from acp_bridge.errors import QueueStoreError
from acp_bridge.host.client import text_content

__all__ = ["send_command"]


def send_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    return run_verb("send", lambda: _send(args))


async def _send(args: argparse.Namespace) -> int:
    store = store_path(args)
    record = resolve_conversation(store, args.conversation_id)
    owner = owner_endpoints(store, record.id, host_socket(args, store))
    async with AsyncExitStack() as stack:
        client = await open_owner(
            stack, owner.endpoints, store, timeout_s=args.timeout, verb="send"
        )
        if client is not None:
            for text in args.message:
                seq = await client.send(
                    record.id,
                    text_content(text),
                    interrupt=args.interrupt,
                    steer=args.steer,
                    label=args.label,
                )
                print(seq, flush=True)
            return EXIT_OK
    return _commit_for_next_owner(args, store, record.id, owner)


def _commit_for_next_owner(
    args: argparse.Namespace, store: Path, conversation_id: str, owner: Owner
) -> int:
    seqs: list[int] = []
    with open_store(store, read_only=False) as opened:
        if opened is None:  # removed since it was resolved
            raise VerbFailed(f"the store {store} was removed; nothing was sent")
        for text in args.message:
            try:
                message = opened.add_message(
                    conversation_id,
                    text_content(text),
                    next=args.interrupt or args.steer,
                    unpause=True,  # a new send after a stop resumes the queue, as the owner's
                    now=time.time(),
                )
            except QueueStoreError as exc:
                raise VerbFailed(f"{exc}; not stored: {text[:60]!r}") from exc
            seqs.append(message.seq)
            print(message.seq, flush=True)
    which = ", ".join(str(seq) for seq in seqs)
    plural = "s" if len(seqs) > 1 else ""
    text = (
        f"{owner.absent_owner_text(conversation_id)}: message{plural} {which} stored in "
        f"{store}, queued for the next owner (acp-bridge run --conversation {conversation_id}, "
        "or a host)"
    )
    if args.steer:
        text += "; not steered: no turn is running here to steer into, so it goes next"
    elif args.interrupt:
        text += "; nothing running here to interrupt, so it goes next"
    say("send", text)
    sys.stdout.flush()
    return EXIT_OK
