"""``acp-bridge stop ID``: stop a conversation, through whoever owns it (issue 23).

What a stop is: ``Conversation.stop()``, the running turn cancelled with the owner's grace
window (its message ends cancelled) and the queue paused: the queued messages stay queued,
durably, and nothing more is prompted until a send or a resume.

Who does it, in order: the owner a socket here reaches (a ``run`` or ``chat`` that holds the
conversation, else the host, ``_acp_bridge/stop``); on a PostgreSQL store, a live owner on
another host, through the database (:func:`~.verb_owner.ask_through_store`, answered); with
no live owner, this verb: it takes the conversation's lock (or lease) for a moment and marks
it paused in the store, so the next owner starts nothing until a send.

stdout: the cancelled message's seq, when a turn ran. stderr: what happened, and how many
messages stay queued.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_OK
from acp_bridge.cli.store_open import store_name
from acp_bridge.cli.verb_owner import (
    CONTROL_WAIT_S,
    VerbFailed,
    ask_owner,
    open_store,
    resolve_conversation,
    run_verb,
    say,
    store_path,
)
from acp_bridge.errors import QueueStoreError
from acp_bridge.host.acp_server import pause_in_store
from acp_bridge.host.owner import ConversationBusyError, conversation_owner

__all__ = ["stop_command"]


def stop_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    return run_verb("stop", lambda: _stop(args))


async def _stop(args: argparse.Namespace) -> int:
    store = store_path(args)
    record = resolve_conversation(store, args.conversation_id)
    _owner, asked = await ask_owner(args, record, "stop")
    if asked is None:
        return _report(record.id, _pause_unowned(store, record.id), "no live owner: ")
    if asked.answer is None:
        say(
            "stop",
            f"{asked.owner} did not answer within {CONTROL_WAIT_S:g} s: the stop is stored, "
            "and the owner acts on it when it is reachable",
        )
        return EXIT_OK
    return _report(record.id, asked.answer, f"{asked.owner}: " if asked.owner else "")


def _pause_unowned(store: Path, conversation_id: str) -> dict[str, Any]:
    """Nobody owns the conversation: own it for a moment (its lock, or its lease) and mark it
    paused in the store."""
    with open_store(store, read_only=False) as opened:
        if opened is None:
            raise VerbFailed(f"the store {store_name(store)} was removed; nothing was stopped")
        holder = conversation_owner(opened, store, conversation_id)
        try:
            holder.acquire()
        except ConversationBusyError as exc:
            raise VerbFailed(
                f"{exc} (it was taken while this stop looked for its owner): run stop again",
                EXIT_AGENT_FAILED,
            ) from exc
        try:
            return pause_in_store(opened, conversation_id, time.time())
        except QueueStoreError as exc:
            raise VerbFailed(f"{exc}; conversation {conversation_id} was not stopped") from exc
        finally:
            holder.release()


def _report(conversation_id: str, answer: dict[str, Any], who: str) -> int:
    seq = answer.get("seq")
    if "error" in answer:  # the owner tried, and failed
        raise VerbFailed(
            f"the owner could not stop conversation {conversation_id}: {answer['error']}",
            EXIT_AGENT_FAILED,
        )
    queued = answer.get("queued")
    if answer.get("cancelled") and isinstance(seq, int):
        print(seq, flush=True)
        done = f"message {seq} cancelled"
    else:
        done = "nothing was running"
    kept = (
        f"{queued} queued message{'s stay' if queued != 1 else ' stays'} queued"
        if isinstance(queued, int)
        else "its queued messages stay queued"
    )
    say(
        "stop",
        f"{who}stopped conversation {conversation_id}: {done}; {kept}, paused until a send "
        "or a resume",
    )
    return EXIT_OK
