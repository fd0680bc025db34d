"""``acp-bridge cancel ID``: cancel a conversation's running turn, through its owner.

With no live owner nothing is running (a message the store shows ``running`` was cut by a dead
owner, and the next owner records it failed and recoverable): said so on stderr, exit 0. On a
PostgreSQL store whose owner is a live host this one cannot reach (another machine), the cancel
is asked through the database (a stored request the owner acts on and answers, issue 23; see
:func:`~.verb_owner.ask_through_store`), and its answer reported as the owner's own would be.
"""

from __future__ import annotations

import argparse
from typing import Any

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_OK
from acp_bridge.cli.verb_owner import (
    CONTROL_WAIT_S,
    VerbFailed,
    ask_owner,
    resolve_conversation,
    run_verb,
    say,
    store_path,
)

__all__ = ["cancel_command"]


def cancel_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    return run_verb("cancel", lambda: _cancel(args))


async def _cancel(args: argparse.Namespace) -> int:
    record = resolve_conversation(store_path(args), args.conversation_id)
    owner, asked = await ask_owner(args, record, "cancel")
    if asked is None:
        say("cancel", f"{owner.absent_owner_text(record.id)}: nothing is running to cancel")
        return EXIT_OK
    if asked.answer is None:
        say(
            "cancel",
            f"{asked.owner} did not answer within {CONTROL_WAIT_S:g} s: the cancel is stored, "
            "and the owner acts on it when it is reachable (if that turn still runs then)",
        )
        return EXIT_OK
    return _report(record.id, asked.answer)


def _report(conversation_id: str, answer: dict[str, Any]) -> int:
    seq = answer.get("seq")
    if "error" in answer:  # the owner tried, and failed
        raise VerbFailed(
            f"the owner could not cancel conversation {conversation_id}: {answer['error']}",
            EXIT_AGENT_FAILED,
        )
    if answer.get("cancelled"):
        if isinstance(seq, int):
            print(seq, flush=True)
        say("cancel", f"cancelled message {seq} of conversation {conversation_id}")
    else:
        say("cancel", f"nothing was running in conversation {conversation_id}")
    return EXIT_OK
