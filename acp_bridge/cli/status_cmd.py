"""``acp-bridge status [ID] [--json]``: what the owner says of its conversations, or the store.

Without ID: the host's open conversations (``_acp_bridge/status``); with no host, every stored
conversation, marked ``no host``. With ID: the owner the conversation's lock names, else the
host; a host that does not hold it open, or no owner at all, leaves the store's word, marked.
On a PostgreSQL store whose conversation a live host this one cannot reach owns (issue 23),
the store's word is marked ``owned by another host``, with that owner as its lease row names it
(host, pid, tag, heartbeat age) and the stored queue.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AsyncExitStack
from typing import Any

from acp_bridge.cli.exit_codes import EXIT_OK
from acp_bridge.cli.guarded_output import guarded_stdout
from acp_bridge.cli.store_open import pg_store, store_name
from acp_bridge.cli.verb_owner import (
    agent_name,
    host_socket,
    lease_owner_text,
    open_owner,
    open_store,
    owner_endpoints,
    resolve_conversation,
    run_verb,
    say,
    store_path,
)
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store_api import Store
from acp_bridge.errors import ErrorCode
from acp_bridge.host.client import Endpoint, HostClient, HostRequestError
from acp_bridge.host.status_rows import stored_queue_status

__all__ = ["status_command"]

_COLUMNS = ("ID", "STATE", "PID", "QUEUED", "RUNNING", "CLIENTS", "AGENT")


def status_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    with guarded_stdout():
        return run_verb("status", lambda: _status(args))


async def _status(args: argparse.Namespace) -> int:
    store = store_path(args)
    socket = host_socket(args, store)
    rows: list[dict[str, Any]]
    if args.conversation_id is None:
        async with AsyncExitStack() as stack:
            client = await open_owner(
                stack, [Endpoint(socket=socket)], store, timeout_s=args.timeout, verb="status"
            )
            if client is not None:
                rows = [_owned(row, client) for row in await client.status()]
                _print(args, rows, empty=f"the host on {socket} holds no conversation open")
                return EXIT_OK
        with open_store(store) as opened:
            records = [] if opened is None else opened.list_conversations()
            rows = [_stored(opened, record) for record in records] if opened is not None else []
        _print(
            args,
            rows,
            empty=f"no host on {socket}, and no stored conversation in {store_name(store)}",
        )
        return EXIT_OK
    record = resolve_conversation(store, args.conversation_id)
    owner = owner_endpoints(store, record.id, socket)
    async with AsyncExitStack() as stack:
        client = await open_owner(
            stack, owner.endpoints, store, timeout_s=args.timeout, verb="status"
        )
        if client is not None:
            try:
                found = await client.status(record.id)
            except HostRequestError as exc:
                if exc.code != ErrorCode.RESOURCE_NOT_FOUND and not exc.is_owned_elsewhere:
                    raise
                found = []  # not held open there (or owned elsewhere): the store's word
            if found:
                _print(args, [_owned(row, client) for row in found], empty="")
                return EXIT_OK
            state = "not open"  # the owner answered, and does not hold it open
        else:
            state = "no host"
    with open_store(store) as opened:
        rows = [] if opened is None else [_owned_elsewhere(opened, _stored(opened, record, state))]
    _print(args, rows, empty=f"no stored conversation {record.id} in {store_name(store)}")
    elsewhere = rows[0]["owner"] if rows else None
    if isinstance(elsewhere, dict) and not args.json:
        say(
            "status",
            f"conversation {record.id} is {rows[0]['agentState']}: {elsewhere['text']}, "
            f"heartbeat {elsewhere['heartbeatAgeS']:.1f} s ago; the queue shown is the store's",
        )
    return EXIT_OK


def _owned_elsewhere(store: Store, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (the store's word) with the live owner a shared store's lease names, if any."""
    shared = pg_store(store)
    lease = None if shared is None else shared.lease_owner(row["conversationId"])
    if lease is None or not lease.held:
        return row
    owner = {
        "host": lease.host,
        "pid": lease.pid,
        "tag": lease.owner,
        "heartbeatAgeS": round(lease.heartbeat_age_s, 3),
        "text": lease_owner_text(lease),
    }
    return {**row, "agentState": "owned by another host", "pid": lease.pid, "owner": owner}


def _owned(row: dict[str, Any], client: HostClient) -> dict[str, Any]:
    info = client.info
    owner = {"socket": str(client.endpoint), "pid": info.pid if info is not None else None}
    return {**row, "owner": owner}


def _stored(store: Store, record: ConversationRecord, state: str = "no host") -> dict[str, Any]:
    return {
        "conversationId": record.id,
        "agent": agent_name(record),
        "agentState": state,
        "pid": None,
        **stored_queue_status(store, record.id, paused=record.paused),
        "clients": 0,
        "lastEvent": None,
        "owner": None,
    }


def _print(args: argparse.Namespace, rows: list[dict[str, Any]], *, empty: str) -> None:
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False, separators=(",", ":")), flush=True)
        return
    if not rows:
        if empty:
            print(f"acp-bridge status: {empty}", file=sys.stderr)
        return
    table = [_COLUMNS] + [_cells(row) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS) - 1)]
    for line in table:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        print("  ".join([*cells, line[-1]]).rstrip(), flush=True)


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    def shown(value: Any) -> str:
        return "-" if value is None else str(value)

    return (
        shown(row.get("conversationId")),
        shown(row.get("agentState")),
        shown(row.get("pid")),
        shown(row.get("queueDepth")) + (" paused" if row.get("paused") else ""),
        shown(row.get("runningSeq")),
        shown(row.get("clients")),
        shown(row.get("agent")),
    )
