"""``conversations``, ``show`` and ``prune``: the stored conversations, read from the store.

Reading never writes (issue 21): with no file at ``--store``, ``conversations`` lists nothing and
``show`` reports the id unknown; an existing store is opened read-only (nothing in or beside it
changes, so a store you may read but not write can be read), and one of an older acp-bridge is
read as it is, its file upgraded only by a command that writes (``run``, ``chat``, ``prune``). A
store of a newer acp-bridge is refused, and so is a file that is not a private acp-bridge store
of yours (see :mod:`acp_bridge.conversation.store`).

An unknown conversation id is a usage error (exit 2), like ``run --conversation ID``: the
command was given something that does not exist. ``show`` also takes a unique prefix of an id;
an ambiguous prefix is exit 2 too, naming the candidates.

``prune`` never removes a conversation that a running ``acp-bridge`` process owns: it takes the
conversation's owner lock (see :mod:`.owner`) before deleting it, skips it when the lock is
held, and removes the lock file of a conversation it deleted while it still holds the lock.
Only owners that take the lock are seen: a library program driving a conversation without it
is not.

A reader of stdout that goes away (``acp-bridge conversations | head -1``) ends the output
quietly, the exit code unchanged (the reader had what it wanted; ``prune`` still prunes):
:func:`~acp_bridge.cli.guarded_output.guarded_stdout`, the way ``run`` handles it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from acp_bridge.cli.columns import aligned
from acp_bridge.cli.exit_codes import EXIT_OK, EXIT_USAGE
from acp_bridge.cli.guarded_output import guarded_stdout
from acp_bridge.cli.owner import ConversationBusyError, ConversationOwner
from acp_bridge.cli.store_open import open_store, place_of_args, url_at
from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.records import ConversationRecord, StoredMessage
from acp_bridge.conversation.store_api import Store, iter_events
from acp_bridge.conversation.transcript import REPLY_LIMIT_BYTES
from acp_bridge.errors import QueueStoreError, UnsafeFileError
from acp_bridge.host.owner import conversation_owner

__all__ = ["conversations_command", "prune_command", "show_command"]

_STATE_ORDER = (
    "running",
    "steering",
    "queued",
    "done",
    "steered",
    "cancelled",
    "superseded",
    "failed",
)
_STEERING_EVENTS = frozenset({"steered", "steer_fallback"})
"""The event log's steering events, shown with their message (issue 24)."""


class _Refused(Exception):
    """A one-line error for stderr, exit 2."""


def conversations_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    with guarded_stdout():
        return _list(args)


def show_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    with guarded_stdout():
        return _show(args)


def prune_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.older_than is None and args.keep is None:
        parser.error("prune: say what to remove with --older-than DURATION and/or --keep N")
    with guarded_stdout():  # a reader that goes away ends the listing, not the pruning
        return _prune(args)


def _list(args: argparse.Namespace) -> int:
    try:
        with _open_store(args, read_only=True) as store:
            summaries = [] if store is None else store.conversation_summaries()
    except _Refused as exc:
        return _fail(str(exc))
    if args.json:
        for summary in summaries:
            _print_json(_conversation_json(summary.record, summary.states))
        return EXIT_OK
    if not summaries:
        _say("no stored conversations")
        return EXIT_OK
    rows = [("ID", "LAST ACTIVITY", "MESSAGES", "CWD", "AGENT")]
    for summary in summaries:
        record = summary.record
        states = _states_text(summary.states) or "none"
        rows.append(
            (record.id, _when(record.updated_at), states, str(record.cwd), _agent_text(record))
        )
    print("\n".join(aligned(rows)))
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    try:
        with _open_store(args, read_only=True) as store:
            if store is None:
                raise _Refused(
                    f"no stored conversation {args.conversation_id!r}: there is no store at "
                    f"{_store_path(args)}"
                )
            record = store.get_conversation(_resolve(store, args.conversation_id))
            assert record is not None  # just resolved, and we hold no lock: it may be pruned
            messages = store.messages(record.id)
            states = _count_states(messages)
            steering = _steering_events(store, record.id)
    except _Refused as exc:
        return _fail(str(exc))
    if args.json:
        document = _conversation_json(record, states)
        document["messages"] = [
            {**_message_json(message), "steering": steering.get(message.seq, [])}
            for message in messages
        ]
        _print_json(document)
        return EXIT_OK
    _print_transcript(record, messages, states, steering)
    return EXIT_OK


def _steering_events(store: Store, conversation_id: str) -> dict[int, list[dict[str, Any]]]:
    """The ``steered`` and ``steer_fallback`` events of the log, by message, oldest first."""
    found: dict[int, list[dict[str, Any]]] = {}
    for entry in iter_events(store, conversation_id):
        if entry.kind in _STEERING_EVENTS and entry.seq is not None:
            data = entry.data if isinstance(entry.data, dict) else {}
            found.setdefault(entry.seq, []).append({"event": entry.kind, "ts": entry.ts, **data})
    return found


def _prune(args: argparse.Namespace) -> int:
    store_path = _store_path(args)
    now = time.time()
    removed = skipped = 0
    try:
        with _open_store(args, read_only=False) as store:
            summaries = [] if store is None else store.conversation_summaries()
            for index, summary in enumerate(summaries):  # most recently active first
                record = summary.record
                if args.keep is not None and index < args.keep:
                    continue
                if args.older_than is not None and now - record.updated_at <= args.older_than:
                    continue
                assert store is not None
                if _remove(store, store_path, record.id, dry_run=args.dry_run):
                    print(record.id, flush=True)
                    removed += 1
                else:
                    skipped += 1
    except _Refused as exc:
        return _fail(str(exc))
    verb = "would remove" if args.dry_run else "removed"
    kept = f"; {skipped} skipped" if skipped else ""
    _say(f"{verb} {removed} conversation{'' if removed == 1 else 's'}{kept}")
    return EXIT_OK


def _remove(store: Store, store_path: Path, conversation_id: str, *, dry_run: bool) -> bool:
    """Delete one conversation under its owner lock; False (and a line on stderr) when a running
    process owns it or its owner cannot be checked."""
    try:
        owner = conversation_owner(store, store_path, conversation_id)
        if isinstance(owner, ConversationOwner) and dry_run and not owner.path.exists():
            return True  # never owned: nothing to check, and a dry run creates no lock file
        owner.acquire()
    except ConversationBusyError as exc:
        _say(f"skipping {exc}")
        return False
    except UnsafeFileError as exc:  # the locks directory itself: every conversation's
        raise _Refused(f"cannot check who owns conversation {conversation_id}: {exc}") from exc
    except (OSError, ValueError) as exc:
        _say(f"skipping conversation {conversation_id}: cannot check its owner lock ({exc})")
        return False
    try:
        if not dry_run:
            store.delete_conversation(conversation_id)
            if isinstance(owner, ConversationOwner):  # while held: nobody can own it meanwhile
                owner.path.unlink(missing_ok=True)
    except QueueStoreError as exc:
        raise _Refused(str(exc)) from exc
    finally:
        owner.release()
    return True


# -- reading the store --------------------------------------------------------------------------


def _store_path(args: argparse.Namespace) -> Path:
    """The store's place: the SQLite file, or a PostgreSQL store's place (see
    :func:`~.store_open.store_place`; :func:`_open_store` opens the URL again from it)."""
    return place_of_args(args.store)


@contextmanager
def _open_store(args: argparse.Namespace, *, read_only: bool) -> Iterator[Store | None]:
    """The store at ``--store``, or None when there is no file there (nothing is created)."""
    path = _store_path(args)
    url = url_at(path)
    if url is None and not path.exists() and not path.is_symlink():
        yield None  # a dangling link is refused, not absent
        return
    try:
        store = open_store(url or str(path), read_only=read_only)
    except QueueStoreError as exc:
        text = str(exc)  # one line that names the store once
        line = text if str(path) in text else f"cannot read the store {path}: {text}"
        raise _Refused(line) from exc
    try:
        yield store
    except QueueStoreError as exc:
        raise _Refused(str(exc)) from exc
    finally:
        store.close()


def _resolve(store: Store, wanted: str) -> str:
    """The id ``wanted`` names: itself, or the one id it is a prefix of."""
    found = store.find_conversations(wanted) if wanted else []
    if len(found) == 1:
        return found[0]
    if not found:
        raise _Refused(
            f"no stored conversation {wanted!r} in {store.path} (acp-bridge conversations "
            "lists them)"
        )
    listed = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
    raise _Refused(f"{wanted!r} is the start of several conversations ({listed}); say more")


def _count_states(messages: list[StoredMessage]) -> dict[str, int]:
    states: dict[str, int] = {}
    for message in messages:
        states[message.state.value] = states.get(message.state.value, 0) + 1
    return states


# -- JSON ----------------------------------------------------------------------------------------


def _conversation_json(record: ConversationRecord, states: dict[str, int]) -> dict[str, Any]:
    return {
        "id": record.id,
        "cwd": record.cwd,
        "agent": list(record.agent.get("argv") or []),
        "sessionId": record.session_id,
        "title": record.title,
        "paused": record.paused,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "messages": {state: states[state] for state in _STATE_ORDER if state in states},
        "usage": record.usage.to_json(),
    }


def _message_json(message: StoredMessage) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "state": message.state.value,
        "stopReason": message.stop_reason,
        "error": message.error,
        "recoverable": message.recoverable,
        "attempts": message.attempts,
        "createdAt": message.created_at,
        "startedAt": message.started_at,
        "finishedAt": message.finished_at,
        "prompt": message.content,
        "reply": message.reply,
        "replyTruncated": message.reply_truncated,
        "usage": message.usage.to_json(),
    }


def _print_json(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


# -- text ----------------------------------------------------------------------------------------


def _print_transcript(
    record: ConversationRecord,
    messages: list[StoredMessage],
    states: dict[str, int],
    steering: dict[int, list[dict[str, Any]]],
) -> None:
    out = sys.stdout
    out.write(f"conversation {record.id}\n")
    out.write(f"  cwd       {record.cwd}\n")
    out.write(f"  agent     {_agent_text(record)}\n")
    out.write(f"  session   {record.session_id or '(none started)'}\n")
    out.write(f"  created   {_when(record.created_at)}, last activity {_when(record.updated_at)}\n")
    out.write(f"  messages  {_states_text(states) or 'none'}")
    out.write(" (paused)\n" if record.paused else "\n")
    out.write(f"  usage     {record.usage.summary()}\n")
    for message in messages:
        out.write(f"\n#{message.seq} {_outcome_text(message)}\n")
        for line in _prompt_text(message.content).splitlines() or [""]:
            out.write(f"> {line}\n")
        for event in steering.get(message.seq, []):
            out.write(f"{_steering_text(event)}\n")
        if message.state is MessageState.STEERED:
            continue  # its reply is the reply of the turn it joined
        if message.reply:
            out.write(message.reply if message.reply.endswith("\n") else message.reply + "\n")
        elif message.reply is None and message.is_final:
            out.write("(no reply recorded)\n")
        if message.reply_truncated:
            out.write(f"[reply cut at {REPLY_LIMIT_BYTES // (1 << 20)} MiB]\n")
        if not message.usage.is_empty:
            out.write(f"  usage: {message.usage.summary()}\n")


def _steering_text(event: dict[str, Any]) -> str:
    if event["event"] == "steered":
        return f"[steered into #{event.get('into')} ({event.get('outcome', 'taken')})]"
    return f"[not steered, queued first: {event.get('reason')}]"


def _outcome_text(message: StoredMessage) -> str:
    state = message.state.value
    if message.stop_reason and state in ("done", "cancelled"):
        state += f" ({message.stop_reason})"
    if message.attempts > 1:
        state += f", {message.attempts} attempts"
    if message.finished_at is not None:
        state += f", {_when(message.finished_at)}"
    if message.error is not None:  # last: it may run over several lines (a stderr tail)
        recoverable = "recoverable" if message.recoverable else "not recoverable"
        state += f" ({recoverable}): {message.error.get('message', '')}"
    return state


def _prompt_text(content: list[Any]) -> str:
    parts: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict):
            parts.append(f"[{block.get('type', 'block')}]")
    return "\n".join(parts)


def _states_text(states: dict[str, int]) -> str:
    return ", ".join(f"{states[s]} {s}" for s in _STATE_ORDER if s in states)


def _agent_text(record: ConversationRecord) -> str:
    argv = record.agent.get("argv") or []
    return shlex.join(str(arg) for arg in argv) if argv else "(unknown)"


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)


def _fail(text: str) -> int:
    _say(text)
    return EXIT_USAGE
