"""``acp-bridge watch ID [--json] [--from CURSOR]``: a conversation's events, replayed then live.

Through the owner: ``_acp_bridge/watch`` from the cursor; the owner sends the stored events
after it, then the live ones, each once (the cursor is the store's event-log id). Plain output
goes through ``run``'s renderer (:class:`~acp_bridge.cli.render.EventPrinter`), plus one line
per message that starts (there is no prompt line of our own to show it); ``--json`` prints each
event as ``run --json`` does, with its ``cursor``. The watch ends when the conversation is
closed (an event ``conversation_closed``: exit 0), when the owner goes away (the connection
ends: a run that finished, a host that stopped; exit 0, as with no owner at the start), when
the owner cuts the watch off (``_acp_bridge/disconnected``, e.g. a watcher too far behind:
exit 3, the reason on stderr), on Ctrl-C (exit 130) or when stdout's reader goes away (130).

With no live owner: the stored events after the cursor, read from the store in pages, then a
line saying nobody is following the conversation, exit 0.

On the way out, stderr names the last cursor seen, to continue from with ``--from``.
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final, Literal

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from acp_bridge.cli.render import EventPrinter
from acp_bridge.cli.store_open import store_name, url_at
from acp_bridge.cli.verb_owner import (
    Owner,
    VerbFailed,
    agent_name,
    host_socket,
    open_owner,
    open_store,
    owner_endpoints,
    resolve_conversation,
    run_verb,
    say,
    store_path,
)
from acp_bridge.conversation.records import ConversationRecord, EventRecord
from acp_bridge.host.client import HostClient
from acp_bridge.host.log_view import watch_event

__all__ = ["CLOSED_EVENTS", "watch_command"]

CLOSED_EVENTS: Final = frozenset({"conversation_closed", "closed"})
"""Event kinds that say the conversation was closed: the watch is over."""
_STORE_PAGE: Final = 1000
"""Stored events read at once when no owner is live (bounded memory, whatever the log's size)."""


def watch_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    watch = _Watch(args)
    try:
        return run_verb("watch", watch.run)
    finally:
        watch.say_where()


class _Watch:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cursor: int | None = args.from_cursor
        self.reader_gone = False
        self.printer: EventPrinter | None = None

    async def run(self) -> int:
        args = self.args
        store = store_path(args)
        record = resolve_conversation(store, args.conversation_id)
        self.printer = EventPrinter(
            json_mode=args.json, agent=agent_name(record), on_text_closed=self._reader_went
        )
        owner = owner_endpoints(store, record.id, host_socket(args, store))
        async with AsyncExitStack() as stack:
            client = await open_owner(
                stack, owner.endpoints, store, timeout_s=args.timeout, verb="watch"
            )
            if client is not None:
                return await self._follow(client, record, store)
        return await self._replay_stored(store, record, owner)

    async def _follow(self, client: HostClient, record: ConversationRecord, store: Path) -> int:
        async with client.watch(record.id, self.cursor) as events:
            async for item in events:
                self.cursor = item.cursor
                kind = self._show(item.event, item.cursor)
                if self.reader_gone:
                    return EXIT_INTERRUPTED
                if kind in CLOSED_EVENTS:
                    await self._flush()
                    say("watch", f"conversation {record.id} was closed")
                    return EXIT_OK
        await self._flush()
        if client.disconnect_reason is None:
            # The owner went away (a run that finished, a host that stopped or died): nothing
            # follows the conversation now, as when no owner is live at the start.
            say(
                "watch",
                f"the owner on {client.endpoint} went away; nothing follows conversation "
                f"{record.id} now",
            )
            return EXIT_OK
        raise VerbFailed(
            f"the owner on {client.endpoint} cut this watch off: {client.disconnect_reason}",
            EXIT_AGENT_FAILED,
        )

    async def _replay_stored(self, store: Path, record: ConversationRecord, owner: Owner) -> int:
        if url_at(store) is not None:  # PostgreSQL: follow the shared log (issue 23)
            return await self._follow_shared(store, record)
        with open_store(store) as opened:
            if opened is None:
                raise VerbFailed(f"the store {store_name(store)} was removed")
            while True:
                page = opened.events(record.id, self.cursor or 0, _STORE_PAGE)
                for stored in page:
                    self.cursor = stored.id
                    shown = watch_event(record.id, stored.id, stored.kind, stored.ts, stored.data)
                    self._show(shown["event"], stored.id)
                    if self.reader_gone:
                        return EXIT_INTERRUPTED
                if len(page) < _STORE_PAGE:
                    break
        await self._flush()
        say(
            "watch",
            f"{owner.absent_owner_text(record.id)}: the stored events are shown; nothing is "
            "following the conversation",
        )
        return EXIT_OK

    async def _follow_shared(self, store: Path, record: ConversationRecord) -> int:
        """Show the conversation's stored events, then follow its shared log while a host
        owns it (:func:`~.store_follow.follow_shared_log`)."""
        from acp_bridge.cli.store_follow import follow_shared_log
        from acp_bridge.cli.store_open import pg_store

        def show(stored: EventRecord) -> Literal["closed", "reader gone"] | None:
            self.cursor = stored.id
            shown = watch_event(record.id, stored.id, stored.kind, stored.ts, stored.data)
            kind = self._show(shown["event"], stored.id)
            if self.reader_gone:
                return "reader gone"
            return "closed" if kind in CLOSED_EVENTS else None

        with open_store(store) as opened:
            shared = None if opened is None else pg_store(opened)
            if shared is None:
                raise VerbFailed(f"the store {store_name(store)} cannot be followed")
            ending = await follow_shared_log(shared, record.id, self.cursor or 0, show)
        await self._flush()
        if ending == "reader gone":
            return EXIT_INTERRUPTED
        if ending == "closed":
            say("watch", f"conversation {record.id} was closed")
        else:
            say("watch", f"no host owns conversation {record.id} now; nothing follows it")
        return EXIT_OK

    def _show(self, event: dict[str, Any], cursor: int) -> str:
        assert self.printer is not None
        kind = str(event.get("event"))
        if self.args.json:
            self.printer.show({**event, "cursor": cursor})
        elif kind == "turn_started":
            say("watch", f"message {event.get('seq')}: {event.get('text', '')}")
        elif "event" in event:
            self.printer.show(event)
        return kind

    async def _flush(self) -> None:
        if self.printer is not None:
            await self.printer.flush()

    def _reader_went(self) -> None:
        self.reader_gone = True

    def say_where(self) -> None:
        if self.cursor is not None and not self.args.json:
            say("watch", f"last cursor {self.cursor} (continue with --from {self.cursor})")
        elif self.cursor is not None:
            say("watch", f"last cursor {self.cursor}")
