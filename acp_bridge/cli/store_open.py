"""Which store a command uses, and opening it: a SQLite file or a PostgreSQL database.

The store is ``--store``, else ``$ACP_BRIDGE_STORE``, else the default SQLite file. A
``postgresql://`` (or ``postgres://``) URL selects PostgreSQL; anything else is a SQLite path.
This is where the backend is injected (issue 23): the command line opens the store and hands
it down as a :class:`~acp_bridge.conversation.store_api.Store`; nothing below it imports
:mod:`acp_bridge.pgstore`, which is imported here only for a URL (it needs the ``postgres``
extra, psycopg).

No password is ever printed: a PostgreSQL store is named by its redacted URL
(:attr:`Store.path`), and its errors are scrubbed (:mod:`acp_bridge.pgstore.connection`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from acp_bridge.cli.options import default_store_path
from acp_bridge.cli.store_args import STORE_ENV
from acp_bridge.conversation.store_api import Store
from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.url import is_postgres_url

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from acp_bridge.conversation.conversation import Conversation
    from acp_bridge.host.serve import Host
    from acp_bridge.pgstore.lease import Lease
    from acp_bridge.pgstore.notify import Notification
    from acp_bridge.pgstore.store import PgStore

__all__ = [
    "answering_controls",
    "cut_when_lease_lost",
    "is_postgres_url",
    "keeping_leases",
    "listen_for_sends",
    "open_store",
    "pg_store",
    "place_of_args",
    "store_name",
    "store_place",
    "store_spec",
    "url_at",
]

log = logging.getLogger(__name__)


def store_spec(given: str | Path | None) -> str:
    """The store a command uses: ``given`` (``--store``), else ``$ACP_BRIDGE_STORE``, else the
    default SQLite path (raises UnusableHomeError when there is none)."""
    if given:
        return str(given)
    return os.environ.get(STORE_ENV) or str(default_store_path())


def store_place(spec: str) -> Path:
    """Where the store ``spec`` lives on this machine, for what goes beside a store (the
    host's socket, the lock files): the SQLite file itself, or for a PostgreSQL URL a name of
    its own in the state directory (one per database, the password left out), so that a
    ``serve`` and the verbs of one database find each other's socket."""
    if not is_postgres_url(spec):
        return Path(spec)
    from acp_bridge.pgstore.url import redact

    digest = hashlib.sha256(redact(spec).encode()).hexdigest()[:12]
    return default_store_path().with_name(f"postgresql-{digest}")


_URLS: dict[Path, str] = {}
"""The URL of each PostgreSQL store :func:`place_of_args` placed (a place is a Path; a URL
is not one: ``Path`` would fold its ``//``)."""


def place_of_args(given: str | None) -> Path:
    """:func:`store_place` of the store ``--store`` (``given``) names (see
    :func:`store_spec`); :func:`url_at` gives a PostgreSQL URL back from its place."""
    spec = store_spec(given)
    place = store_place(spec)
    if is_postgres_url(spec):
        _URLS[place] = spec
    return place


def url_at(place: Path) -> str | None:
    """The PostgreSQL URL :func:`place_of_args` placed at ``place``; None for a SQLite file."""
    return _URLS.get(place)


def store_name(place: Path) -> str:
    """The store at ``place`` as people are shown it: a SQLite file's path, or a PostgreSQL
    store's URL with its password masked (its place is only a key)."""
    url = url_at(place)
    if url is None:
        return str(place)
    from acp_bridge.pgstore.url import redact

    return redact(url)


def open_store(
    spec: str,
    *,
    durability: Literal["process", "power"] = "process",
    read_only: bool = False,
) -> Store:
    """Open the store ``spec`` names (see :func:`store_spec`): a PostgreSQL store for a URL
    (``durability`` is then the server's, ``read_only`` opens it without migrating), else the
    SQLite store at that path.

    Raises:
        QueueStoreError: the store is refused or unreachable, or psycopg is missing (the
            message says which, and never shows a password).
        OSError: the SQLite file's directory cannot be used.
    """
    if is_postgres_url(spec):
        try:
            from acp_bridge.pgstore.store import PgStore
        except ImportError as exc:
            raise QueueStoreError(
                f"a PostgreSQL store needs psycopg ({exc.name} is missing): "
                "pip install 'acp-supervisor[postgres]'"
            ) from exc
        return PgStore.open(spec, migrate_schema=not read_only)
    from acp_bridge.conversation.store import QueueStore

    return QueueStore.open(spec, durability=durability, read_only=read_only)


def pg_store(store: Store) -> PgStore | None:
    """``store`` as a PostgreSQL store, or None for SQLite (without importing psycopg)."""
    if not store.is_shared:
        return None
    from acp_bridge.pgstore.store import PgStore

    return store if isinstance(store, PgStore) else None


@asynccontextmanager
async def keeping_leases(store: Store) -> AsyncIterator[None]:
    """While the context is open, keep the heartbeat of the leases a PostgreSQL store holds
    (:attr:`PgStore.keeper`), so that no other host takes its conversations over; nothing
    for SQLite. A lease found lost makes that conversation's owner writes fail (the store
    raises LeaseLostError), which ends its turn."""
    shared = pg_store(store)
    if shared is None:
        yield
        return
    async with anyio.create_task_group() as tg:
        await tg.start(shared.keeper.run)
        yield
        tg.cancel_scope.cancel()


def cut_when_lease_lost(store: Store, conversation: Conversation, then: Callable[[], None]) -> None:
    """On a PostgreSQL store (issue 23): when ``conversation``'s lease is lost (another host
    took it over, or the lease session ended), cut its running turn at once
    (``Conversation.lease_lost``: nothing more is written; the next owner ends the message
    failed and recoverable), then call ``then`` (the owner says so and ends), once, on this
    event loop's thread. Nothing for SQLite. Call it from the owner's event loop."""
    shared = pg_store(store)
    if shared is None:
        return
    cut = False

    def lost(lease: Lease) -> None:
        nonlocal cut
        if lease.conversation_id != conversation.id or cut:
            return
        cut = True
        conversation.lease_lost()
        then()

    shared.report_lost_here(lost)


async def listen_for_sends(store: Store, host: Host, task_group: TaskGroup) -> None:
    """On a PostgreSQL store, listen (in ``task_group``) for the messages other hosts commit,
    and hand each conversation notified to ``host`` (:meth:`Host.sent_elsewhere`), and for the
    cancel and stop requests asked through the store (:meth:`Host.control`: every pending one
    of a conversation as the host takes it, and of all after the listener reconnected); returns
    once listening, so nothing committed afterwards is missed. Nothing for SQLite."""
    shared = pg_store(store)
    if shared is None:
        return
    from acp_bridge.pgstore.control import ControlDesk, ControlRequest
    from acp_bridge.pgstore.notify import CONTROL_CHANNEL, QUEUE_CHANNEL, Listener

    async def act(request: ControlRequest) -> dict[str, Any] | None:
        return await host.control(request.conversation_id, request.kind, request.seq)

    desk = ControlDesk(shared, act)

    def woken(notification: Notification) -> None:
        if notification.channel == CONTROL_CHANNEL:  # a cancel or stop asked elsewhere
            task_group.start_soon(desk.sweep, notification.conversation_id)
        else:
            task_group.start_soon(host.sent_elsewhere, notification.conversation_id)

    def reconnected() -> None:  # what was notified meanwhile is lost: read the store again
        task_group.start_soon(host.missed_notifications)
        task_group.start_soon(desk.sweep)

    def taken(conversation_id: str) -> None:
        # Each conversation the host takes (at start, or when asked for it): what is pending
        # for it, so a request stored for an owner that died is acted on by the next one.
        task_group.start_soon(desk.sweep, conversation_id)

    host.on_taken = taken
    listener = Listener(
        shared.url,
        woken,
        channels=(QUEUE_CHANNEL, CONTROL_CHANNEL),
        owner_tag=shared.owner_tag,
        on_reconnected=reconnected,
    )
    await task_group.start(listener.run)


@asynccontextmanager
async def answering_controls(store: Store, conversation: Conversation) -> AsyncIterator[None]:
    """While the context is open, on a PostgreSQL store: act on the cancel and stop requests
    asked of ``conversation`` through the store (a ``run`` or ``chat`` owner; issue 23), at
    each notification and, for every pending one, at start and after the listener
    reconnected. Nothing for SQLite (the verbs reach the owner's socket). A listener that
    cannot reconnect within its bound is logged, and the owner goes on without it."""
    shared = pg_store(store)
    if shared is None:
        yield
        return
    from acp_bridge.host.acp_server import cancel_answer, stop_answer
    from acp_bridge.pgstore.control import ControlDesk, ControlRequest
    from acp_bridge.pgstore.notify import CONTROL_CHANNEL, Listener

    async def act(request: ControlRequest) -> dict[str, Any] | None:
        if request.conversation_id != conversation.id:
            return None
        if request.kind == "stop":
            return await stop_answer(conversation)
        return await cancel_answer(conversation, request.seq)

    desk = ControlDesk(shared, act)
    async with anyio.create_task_group() as tg:

        def woken(notification: Notification) -> None:
            if notification.conversation_id == conversation.id:
                tg.start_soon(desk.sweep, conversation.id)

        def reconnected() -> None:  # what was notified meanwhile is lost: read the store
            tg.start_soon(desk.sweep, conversation.id)

        listener = Listener(
            shared.url,
            woken,
            channels=(CONTROL_CHANNEL,),
            owner_tag=shared.owner_tag,
            on_reconnected=reconnected,
        )

        listening = anyio.Event()

        async def listen() -> None:
            try:
                await listener.run(task_status=_SetEvent(listening))
            except QueueStoreError as exc:
                log.warning("%s: no cancel or stop through the store: %s", conversation.id, exc)
            finally:
                listening.set()

        tg.start_soon(listen)
        await listening.wait()
        tg.start_soon(desk.sweep, conversation.id)  # asked before this owner listened
        yield
        tg.cancel_scope.cancel()


class _SetEvent:
    """A task status that sets an event when the task has started."""

    def __init__(self, event: anyio.Event) -> None:
        self._event = event

    def started(self, value: None = None) -> None:
        self._event.set()
