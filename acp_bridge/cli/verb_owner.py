"""Finding and reaching a conversation's owner, for the client verbs (issue 22).

``send``, ``watch``, ``cancel``, ``stop`` and ``status`` share this: the store and the host
socket their options name (:func:`store_path`, :func:`host_socket`), the conversation an id (or
a unique prefix of one) names in the store (:func:`resolve_conversation`), where its owner may
listen (:func:`owner_endpoints`: the live owner's socket from its lock file, then the host's
socket), and the first of those that answers and serves this store (:func:`open_owner`).
Failures end the command with one line on stderr and an exit code from :mod:`.exit_codes`
(:class:`VerbFailed`, :func:`run_verb`); never a traceback.

On a PostgreSQL store, an owner on another host is reached through the database
(:func:`ask_through_store`: a stored request its owner answers, issue 23), and described from
its lease row (:func:`lease_owner_text`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_USAGE
from acp_bridge.cli.store_open import open_store as open_any_store
from acp_bridge.cli.store_open import pg_store, place_of_args, store_name, url_at
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store_api import Store
from acp_bridge.core.condition import Condition
from acp_bridge.errors import QueueStoreError
from acp_bridge.host.client import (
    CONNECT_TIMEOUT_S,
    Endpoint,
    HostClient,
    HostClientError,
    HostFailedError,
    HostRequestError,
    HostUnusableError,
    NoHostError,
    candidate_endpoints,
    connect_host,
)
from acp_bridge.host.endpoint import default_socket_path
from acp_bridge.host.owner import OwnerInfo, read_owner

if TYPE_CHECKING:
    from acp_bridge.pgstore.lease import LeaseRow

__all__ = [
    "CONTROL_WAIT_S",
    "Owner",
    "StoreAsked",
    "VerbFailed",
    "agent_name",
    "ask_owner",
    "ask_through_store",
    "exit_code",
    "host_socket",
    "lease_owner_text",
    "open_owner",
    "open_store",
    "owner_endpoints",
    "resolve_conversation",
    "run_verb",
    "say",
    "store_path",
]


class VerbFailed(Exception):
    """End the verb: ``text`` on stderr, exit ``code``."""

    def __init__(self, text: str, code: int = EXIT_USAGE) -> None:
        super().__init__(text)
        self.code = code


def run_verb(verb: str, main: Callable[[], Awaitable[int]]) -> int:
    """Run a verb's async ``main`` (on asyncio); its failures become one stderr line and an
    exit code. SIGINT is :func:`acp_bridge.cli.main.main`'s to report (exit 130)."""
    try:
        return anyio.run(main)
    except VerbFailed as exc:
        say(verb, str(exc))
        return exc.code
    except HostFailedError as exc:
        say(verb, f"{exc}; retry, and if it persists see the host's log or restart it")
        return exit_code(exc)
    except HostClientError as exc:
        say(verb, str(exc))
        return exit_code(exc)


def exit_code(exc: HostClientError) -> int:
    """A refused endpoint (another store, no permission, a bad URL) or a request the host
    calls invalid is a usage error; a host that is not there or failed the exchange is 3 (to
    its clients, the host is the agent, and it could not be used)."""
    if isinstance(exc, HostUnusableError):
        return EXIT_USAGE
    if isinstance(exc, HostRequestError) and exc.is_usage:
        return EXIT_USAGE
    return EXIT_AGENT_FAILED


def say(verb: str, text: str) -> None:
    print(f"acp-bridge {verb}: {text}", file=sys.stderr, flush=True)


def store_path(args: argparse.Namespace) -> Path:
    """The store's place: the SQLite file, or a PostgreSQL store's place (see
    :func:`~.store_open.store_place`; :func:`open_store` opens the URL again from it)."""
    return place_of_args(args.store)


def host_socket(args: argparse.Namespace, store: Path) -> Path:
    return Path(args.socket) if args.socket else default_socket_path(store, os.environ)


@contextlib.contextmanager
def open_store(store: Path, *, read_only: bool = True) -> Iterator[Store | None]:
    """The store, or None when there is no file there (nothing is created). A PostgreSQL
    store is opened from its URL (its place has no file)."""
    url = url_at(store)
    if url is None and not store.exists() and not store.is_symlink():
        yield None  # a dangling link is refused, not absent
        return
    try:
        opened = open_any_store(url or str(store), read_only=read_only)
    except QueueStoreError as exc:
        text = str(exc)
        line = text if str(store) in text else f"cannot read the store {store_name(store)}: {text}"
        raise VerbFailed(line) from exc
    try:
        yield opened
    except QueueStoreError as exc:
        raise VerbFailed(str(exc)) from exc
    finally:
        opened.close()


def resolve_conversation(store: Path, given: str) -> ConversationRecord:
    """The stored conversation ``given`` names (its id, or a unique prefix of it)."""
    with open_store(store) as opened:
        if opened is None:
            raise VerbFailed(
                f"no stored conversation {given!r}: there is no store at {store_name(store)}"
            )
        found = opened.find_conversations(given)
        if not found:
            raise VerbFailed(f"no stored conversation {given!r} in {store_name(store)}")
        if len(found) > 1 and found[0] != given:
            shown = ", ".join(found[:5])
            raise VerbFailed(f"{given!r} names several conversations ({shown}); give more of it")
        record = opened.get_conversation(found[0])
        if record is None:  # removed meanwhile
            raise VerbFailed(f"no stored conversation {given!r} in {store_name(store)}")
        return record


def agent_name(record: ConversationRecord) -> str:
    """The conversation's agent as people call it: its name, else its command line."""
    name = record.agent.get("name")
    if isinstance(name, str) and name:
        return name
    argv = record.agent.get("argv")
    if isinstance(argv, list) and argv:
        return shlex.join(str(part) for part in argv)
    return "agent"


@dataclass(frozen=True)
class Owner:
    """Where a conversation's owner may be: its live owner as the lock says (None: nobody
    holds the lock) and the endpoints to try, in order."""

    lock: OwnerInfo | None
    endpoints: list[Endpoint]

    def absent_owner_text(self, conversation_id: str) -> str:
        """Why nobody answered for ``conversation_id``, for a line on stderr."""
        lock = self.lock
        if lock is not None and lock.socket is None:
            return (
                f"conversation {conversation_id} is owned by process {lock.pid}, which serves "
                "no endpoint (an older acp-bridge?)"
            )
        if lock is not None:
            return (
                f"the owner of conversation {conversation_id} (process {lock.pid}) did not "
                f"answer on {lock.socket}, and no host answered"
            )
        return f"no live owner of conversation {conversation_id} (no host answered)"


def owner_endpoints(store: Path, conversation_id: str, socket: Path) -> Owner:
    """Where the owner of ``conversation_id`` may answer: the socket the live holder of its
    lock serves (if any), then the host's."""
    lock = read_owner(store, conversation_id)
    return Owner(lock, candidate_endpoints(lock, socket))


async def open_owner(
    stack: AsyncExitStack,
    endpoints: list[Endpoint],
    store: Path,
    *,
    timeout_s: float,
    verb: str,
) -> HostClient | None:
    """The first endpoint that answers and serves ``store``, connected (closed with
    ``stack``); None when nothing listens at any of them. ``timeout_s`` bounds each
    request; ``verb`` names us to the owner (its label for what we send)."""
    for endpoint in endpoints:
        connecting = connect_host(
            endpoint,
            store=store,
            client_name=f"acp-bridge {verb}",
            connect_timeout_s=min(timeout_s, CONNECT_TIMEOUT_S),
            request_timeout_s=timeout_s,
        )
        try:
            return await stack.enter_async_context(connecting)
        except NoHostError:
            continue
    return None


# -- an owner on another host, through a shared store (issue 23) -------------------------------

CONTROL_WAIT_S: Final = 10.0
"""How long a verb waits for the answer of an owner it asked through the store."""


@dataclass(frozen=True)
class StoreAsked:
    """A cancel or stop asked of an owner on another host, through the store: the owner's
    answer (``{"cancelled", "seq"?, "queued"?}``; None when none came within
    :data:`CONTROL_WAIT_S`: the request is stored, the owner acts on it when reachable), and
    who the owner is (for a line on stderr)."""

    answer: dict[str, Any] | None
    owner: str


async def ask_through_store(
    store: Path, conversation_id: str, kind: Literal["cancel", "stop"], verb: str
) -> StoreAsked | None:
    """On a PostgreSQL store whose conversation a live host owns: store the request for that
    owner (notified), then wait (bounded, progress on stderr) for its answer, woken by the
    owner's notification. None when the store is SQLite or nobody owns the conversation (the
    caller says what that means).

    A cancel while the store shows no message running is answered here, at once: nothing to
    cancel (a request naming no turn would otherwise cancel a later one)."""
    with open_store(store, read_only=True) as opened:
        shared = None if opened is None else pg_store(opened)
        if shared is None:
            return None
        row = shared.lease_owner(conversation_id)
        if row is None or not row.held:
            return None
        owner = lease_owner_text(row)
        if kind == "cancel" and not shared.messages(conversation_id, ["running"]):
            return StoreAsked({"cancelled": False}, owner)
        from acp_bridge.pgstore.notify import CONTROL_ANSWER_CHANNEL, Listener, Notification

        answered = Condition()

        def woken(notification: Notification) -> None:
            if notification.conversation_id == conversation_id:
                answered.notify_all()

        listener = Listener(
            shared.url, woken, channels=(CONTROL_ANSWER_CHANNEL,), owner_tag=shared.owner_tag
        )
        async with anyio.create_task_group() as tg:
            await tg.start(listener.run)  # listening before asking: no answer is missed
            request = shared.request_control(conversation_id, kind)
            say(
                verb,
                f"conversation {conversation_id} is owned by {owner}; asked it through the "
                f"store to {kind} (request {request.id}), waiting up to {CONTROL_WAIT_S:g} s "
                "for its answer",
            )
            answer = None
            with anyio.move_on_after(CONTROL_WAIT_S):
                while (answer := shared.control_outcome(request.id)) is None:
                    await answered.wait()
            tg.cancel_scope.cancel()
    return StoreAsked(answer, owner)


async def ask_owner(
    args: argparse.Namespace, record: ConversationRecord, kind: Literal["cancel", "stop"]
) -> tuple[Owner, StoreAsked | None]:
    """Ask the owner of ``record``'s conversation to cancel its running turn or to stop:
    through its endpoint on this machine (a ``run``/``chat`` or a host), else, on a shared
    store, through the store (:func:`ask_through_store`). The owner found, and its answer
    (``StoreAsked.owner`` is empty for an owner here), or None when no live owner holds the
    conversation (the caller says what that means)."""
    store = store_path(args)
    owner = owner_endpoints(store, record.id, host_socket(args, store))
    async with AsyncExitStack() as stack:
        client = await open_owner(stack, owner.endpoints, store, timeout_s=args.timeout, verb=kind)
        if client is not None:
            try:
                if kind == "stop":
                    answer = await client.stop(record.id)
                else:
                    cancelled, seq = await client.cancel(record.id)
                    answer = {"cancelled": cancelled, "seq": seq}
            except HostRequestError as exc:
                if not exc.is_owned_elsewhere:  # else: a host here, the owner elsewhere
                    raise
            else:
                return owner, StoreAsked(answer, "")
    return owner, await ask_through_store(store, record.id, kind, kind)


def lease_owner_text(row: LeaseRow) -> str:
    """The owner a lease row names, for people: ``host H (process P)``."""
    pid = row.pid
    return f"host {row.host}" + (f" (process {pid})" if pid is not None else "")
