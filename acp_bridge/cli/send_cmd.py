"""``acp-bridge send ID -m TEXT``: queue messages into a conversation, through its owner.

Through the owner (a run or chat that serves an endpoint, else the host), each message is
``_acp_bridge/send``: committed to the durable queue by the owner, which answers its seq. With no
live owner, the message is committed to the store here (``QueueStore.add_message``, the same
call the owner's ``Conversation.send`` makes), queued: the next owner of the conversation runs
it (``run --conversation ID`` and ``run --resume`` prompt the queued messages first). Nothing is
ever sent twice: a message the owner did not confirm is not committed here as well (the failure
is reported instead, and the user decides).

With ``--steer`` the owner answers once the steer settled (bounded): stderr says, per message,
whether it joined the running turn (``steered into the turn of message N``) or went to the head
of the queue (and why), or that the agent never confirmed it (it is not sent again).

stdout: one seq per message, in order. stderr: what happened to a steer, and what happened when
no owner took a message.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final

from acp_bridge.cli.exit_codes import EXIT_OK
from acp_bridge.cli.store_open import store_name
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
from acp_bridge.conversation.steers import STEER_ANSWER_TIMEOUT_S
from acp_bridge.errors import QueueStoreError
from acp_bridge.host.client import HostClient, HostRequestError, text_content
from acp_bridge.host.steering import RESULT_MARGIN_S

__all__ = ["send_command", "steer_outcome_text"]


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
            for index, text in enumerate(args.message):
                try:
                    if args.steer:
                        await _steer(client, record.id, text, args)
                        continue
                    seq = await client.send(
                        record.id, text_content(text), interrupt=args.interrupt, label=args.label
                    )
                except HostRequestError as exc:
                    if not exc.is_owned_elsewhere:
                        raise
                    # Issue 23: the host here shares a store with the owner on another host:
                    # committed to the store, the owner is notified.
                    args.message = args.message[index:]
                    return _commit_for_next_owner(args, store, record.id, owner, elsewhere=True)
                print(seq, flush=True)
            return EXIT_OK
    return _commit_for_next_owner(args, store, record.id, owner)


async def _steer(
    client: HostClient, conversation_id: str, text: str, args: argparse.Namespace
) -> None:
    """One steer through the owner: its seq on stdout, what became of it on stderr."""
    params: dict[str, Any] = {
        "conversationId": conversation_id,
        "content": text_content(text),
        "steer": True,
    }
    if args.label is not None:
        params["label"] = args.label
    # The owner answers once the steer settled: give it the agent's answer time too.
    limit = args.timeout + STEER_ANSWER_TIMEOUT_S + RESULT_MARGIN_S
    answer = await client.call("_acp_bridge/send", params, timeout_s=limit)
    seq = answer.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise VerbFailed(f"the owner answered _acp_bridge/send without a seq: {answer}")
    print(seq, flush=True)
    say("send", steer_outcome_text(seq, answer))


def steer_outcome_text(seq: int, answer: dict[str, Any]) -> str:
    """One line on what became of steer ``seq``, from the owner's answer."""
    steered, queued, failed = answer.get("steered"), answer.get("queued"), answer.get("failed")
    if isinstance(steered, dict):
        outcome = steered.get("outcome") or "injected"
        return f"message {seq} steered into the turn of message {steered.get('into')} ({outcome})"
    if isinstance(queued, dict):
        reason = _REASONS.get(str(queued.get("reason")), str(queued.get("reason")))
        return f"message {seq} not steered ({reason}): queued next, at the head of the queue"
    if isinstance(failed, dict):
        return (
            f"message {seq}: the agent never confirmed the steer ({failed.get('error')}); "
            "it may have taken it, so it is not sent again (acp-bridge show; retry to resend)"
        )
    if answer.get("pending"):
        return f"message {seq}: steering, no outcome yet (acp-bridge watch follows it)"
    return f"message {seq}: queued (the owner did not say whether it was steered)"


_REASONS: Final = {
    "unsupported": "the agent does not advertise steering",
    "agent_restarting": "the agent is restarting",
    "no_running_turn": "no turn is running",
    "cancelling": "the running turn is being cancelled",
    "steer_in_flight": "another steer is awaiting its answer",
    "failed": "the agent answered failed",
    "promptRequired": "the turn had ended (promptRequired)",
}


def _commit_for_next_owner(
    args: argparse.Namespace,
    store: Path,
    conversation_id: str,
    owner: Owner,
    *,
    elsewhere: bool = False,
) -> int:
    seqs: list[int] = []
    with open_store(store, read_only=False) as opened:
        if opened is None:  # removed since it was resolved
            raise VerbFailed(f"the store {store_name(store)} was removed; nothing was sent")
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
        f"{store_name(store)}, queued for the next owner (acp-bridge run --conversation "
        f"{conversation_id}, or a host)"
    )
    if elsewhere:  # a live owner on another host sharing the store: it is notified
        text = (
            f"conversation {conversation_id} is owned by a host elsewhere: message{plural} "
            f"{which} stored in {store_name(store)}; its owner is notified"
        )
    elif args.steer:
        text += "; not steered: no turn is running here to steer into, so it goes next"
    elif args.interrupt:
        text += "; nothing running here to interrupt, so it goes next"
    say("send", text)
    sys.stdout.flush()
    return EXIT_OK
