"""Following a conversation's event log in a shared (PostgreSQL) store, for ``watch`` on a
conversation whose owner is a host this machine cannot reach (issue 23).

The log is the truth and a notification only a hint (:mod:`acp_bridge.pgstore.notify`): the
follower LISTENs on ``acp_bridge_events`` first, then reads every event after its cursor, and
reads again each time the conversation is notified. It ends when the conversation is closed,
when the reader goes away, or when nobody owns the conversation any more: the owner let go, or
its session ended (the server released its lease). A silent owner's session is noticed by
checking the lease every :data:`OWNER_CHECK_S` while no notification comes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

import anyio

from acp_bridge.conversation.records import EventRecord
from acp_bridge.pgstore.notify import EVENTS_CHANNEL, Listener, Notification
from acp_bridge.pgstore.store import PgStore

__all__ = ["OWNER_CHECK_S", "follow_shared_log"]

OWNER_CHECK_S: Final = 2.0
"""How often a follower with nothing new checks that the conversation still has an owner."""

_PAGE: Final = 1000

Ending = Literal["closed", "no owner", "reader gone"]


async def follow_shared_log(
    store: PgStore,
    conversation_id: str,
    after_id: int,
    show: Callable[[EventRecord], Literal["closed", "reader gone"] | None],
) -> Ending:
    """Show every event of the conversation after ``after_id`` as it is committed, until
    ``show`` says the conversation closed or the reader went, or nobody owns it any more."""
    woken = anyio.Event()

    def notified(notification: Notification) -> None:
        if notification.conversation_id == conversation_id:
            woken.set()

    listener = Listener(store.url, notified, channels=(EVENTS_CHANNEL,), owner_tag=store.owner_tag)
    ending: Ending = "no owner"
    async with anyio.create_task_group() as tg:
        await tg.start(listener.run)  # listening before the first read: nothing is missed
        cursor = after_id
        while True:
            woken = anyio.Event()
            read = await _read_after(store, conversation_id, cursor, show)
            if isinstance(read, str):
                ending = read
                break
            cursor = read
            if not await anyio.to_thread.run_sync(store.is_owned, conversation_id):
                break
            with anyio.move_on_after(OWNER_CHECK_S):
                await woken.wait()
        tg.cancel_scope.cancel()
    return ending


async def _read_after(
    store: PgStore,
    conversation_id: str,
    cursor: int,
    show: Callable[[EventRecord], Literal["closed", "reader gone"] | None],
) -> int | Literal["closed", "reader gone"]:
    """Show every event after ``cursor``; the new cursor, or why to stop."""
    while True:
        page = await anyio.to_thread.run_sync(store.events, conversation_id, cursor, _PAGE)
        for event in page:
            cursor = event.id
            ending = show(event)
            if ending is not None:
                return ending
        if len(page) < _PAGE:
            return cursor
