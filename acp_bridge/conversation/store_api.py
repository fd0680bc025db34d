"""The one interface of a conversation store, whatever its backend (issue 23).

:class:`Store` is the method set the conversation layer, the host and the command line use:
conversations and their event logs, the durable FIFO queue with its exactly-once final states,
the steering writes of issue 24, group commits, and the catalog reads of ``conversations``,
``show`` and ``prune``. Two classes implement it:

- :class:`~.store.QueueStore`, one SQLite file (the embedded default; its module's text is the
  reference for every method's meaning, which the other backend shares);
- ``acp_bridge.pgstore.store.PgStore``, a PostgreSQL database shared by hosts. The
  command line opens it (``--store postgresql://...``) and hands it down as a :class:`Store`:
  nothing below the command line imports :mod:`acp_bridge.pgstore`.

The signatures are the SQLite store's. What PostgreSQL adds stays behind them: an owner write
(everything but creating a conversation, adding a message and reading) needs the
conversation's lease, which the PostgreSQL store holds per conversation and takes on the first
owner write (or when asked first, see ``PgStore.own``); such a write raises a
:class:`~acp_bridge.errors.QueueStoreError` subclass when another live host owns the
conversation or took it over (then nothing was written).

The store is synchronous and thread-safe; async callers run it in a worker thread. Time is an
argument (``now``, epoch seconds) everywhere. Errors: QueueStoreError for a store that fails
(naming the store, never a password), UnknownConversationError / UnknownMessageError for ids
that do not exist (``get_*`` return None), ValueError for bad states and missing outcome
fields, ResourceClosedError after :meth:`Store.close`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Protocol, Self, Unpack, runtime_checkable

from acp_bridge.conversation.queue_states import MessageRecord, MessageState
from acp_bridge.conversation.records import (
    ConversationRecord,
    ConversationSummary,
    EventRecord,
    FinishedTurn,
    StoredMessage,
)
from acp_bridge.conversation.store_catalog import ConversationChanges, LogEntry
from acp_bridge.errors import QueueStoreError

__all__ = ["EVENT_PAGE", "ConversationOwnedError", "SharedStore", "Store", "iter_events"]


class ConversationOwnedError(QueueStoreError):
    """Another live host owns the conversation (a shared store): this host may queue messages
    into it, but not run it; nothing was written."""

    def __init__(self, name: str, conversation_id: str) -> None:
        super().__init__(
            f"{name}: conversation {conversation_id!r} is owned by another live host; send "
            "messages to it (any host may), or wait for that host to let it go"
        )
        self.conversation_id = conversation_id


class Store(Protocol):
    """Conversations, their message queues and their event logs (see the module's text; each
    method means what :class:`~.store.QueueStore`'s method of that name documents)."""

    @property
    def path(self) -> str:
        """The store's name in messages: the SQLite file's path, or the URL without its
        password."""
        ...

    @property
    def is_shared(self) -> bool:
        """True when other hosts may use the store at the same time (PostgreSQL): a message
        can then be added by another host, which wakes the owner by a notification."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    # -- transactions ------------------------------------------------------------------------------

    def batch(self, what: str = ...) -> AbstractContextManager[None]:
        """Every call of this thread inside the block is one transaction, one commit."""
        ...

    def commit_now_if_free(self, work: Callable[[], bool]) -> bool:
        """Run ``work`` in one transaction at once, in this thread, if that cannot wait; False
        when it would have to (always, for a store across a network)."""
        ...

    # -- conversations and event logs --------------------------------------------------------------

    def create_conversation(
        self,
        conversation_id: str | None = None,
        *,
        agent: Mapping[str, Any],
        cwd: str,
        mcp_servers: Sequence[Any] = (),
        additional_directories: Sequence[Any] = (),
        config: Mapping[str, Any] | None = None,
        title: str | None = None,
        now: float,
    ) -> ConversationRecord: ...

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None: ...

    def latest_conversation(self) -> ConversationRecord | None: ...

    def latest_resumable(
        self, cwd: str | None, argv: Sequence[str] | None = None
    ) -> ConversationRecord | None: ...

    def list_conversations(self) -> list[ConversationRecord]: ...

    def conversation_summaries(self) -> list[ConversationSummary]: ...

    def find_conversations(self, prefix: str) -> list[str]: ...

    def delete_conversation(self, conversation_id: str) -> bool: ...

    def update_conversation(
        self, conversation_id: str, *, now: float, **changes: Unpack[ConversationChanges]
    ) -> ConversationRecord: ...

    def add_event(
        self, conversation_id: str, kind: str, data: Any, *, seq: int | None = None, now: float
    ) -> int: ...

    def add_events(
        self, conversation_id: str, entries: Sequence[LogEntry], *, now: float
    ) -> Sequence[int] | None:
        """Append several events in one commit; their ids, in order, where the store tells
        (None: it does not, and a reader of the log reads them back)."""
        ...

    def events(
        self, conversation_id: str, after_id: int = 0, limit: int | None = None
    ) -> list[EventRecord]: ...

    def last_event_id(self, conversation_id: str) -> int: ...

    # -- reading the queue -------------------------------------------------------------------------

    def next_queued(self, conversation_id: str) -> StoredMessage | None: ...

    def queued(self, conversation_id: str) -> list[StoredMessage]: ...

    def messages(
        self, conversation_id: str, states: Iterable[MessageState | str] | None = None
    ) -> list[StoredMessage]: ...

    def queue_state(
        self, conversation_id: str
    ) -> tuple[list[MessageRecord], dict[int, list[Any]]]: ...

    def get_message(self, conversation_id: str, seq: int) -> StoredMessage | None: ...

    # -- changing the queue ------------------------------------------------------------------------

    def add_message(
        self,
        conversation_id: str,
        content: Sequence[Any],
        *,
        next: bool = False,
        unpause: bool = False,
        steering: bool = False,
        behind: Sequence[int] = (),
        now: float,
    ) -> StoredMessage: ...

    def mark_running(
        self,
        conversation_id: str,
        seq: int,
        *,
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool: ...

    def finish(
        self,
        conversation_id: str,
        seq: int,
        state: MessageState | str,
        *,
        stop_reason: str | None = None,
        error: Mapping[str, Any] | None = None,
        recoverable: bool | None = None,
        now: float,
        log: Sequence[LogEntry] = (),
        event: tuple[str, Any] | None = None,
        turn: FinishedTurn | None = None,
        steered_into: int | None = None,
    ) -> bool: ...

    def requeue(
        self, conversation_id: str, seq: int, *, next: bool, now: float, unpause: bool = False
    ) -> bool: ...

    def steer_refused(
        self,
        conversation_id: str,
        seq: int,
        *,
        behind: Sequence[int] = (),
        now: float,
        event: tuple[str, Any] | None = None,
    ) -> bool: ...

    def recover_after_crash(self, conversation_id: str, *, now: float) -> list[int]: ...

    # -- copying -----------------------------------------------------------------------------------

    def import_conversation(
        self,
        record: ConversationRecord,
        messages: Sequence[StoredMessage],
        events: Sequence[EventRecord],
    ) -> bool:
        """Store a conversation copied from another store (``acp-bridge store copy``) as it
        was: its messages in their states, its event log in order (with this store's ids);
        one transaction. False, and nothing changes, when a conversation with its id is here
        already."""
        ...


@runtime_checkable
class SharedStore(Store, Protocol):
    """A store other hosts use at the same time (PostgreSQL): ownership of a conversation is
    the store's lease, not a lock file. :func:`acp_bridge.host.owner.conversation_owner`
    picks the one that applies."""

    def own(self, conversation_id: str) -> Any:
        """Take (or keep) this host's lease of the conversation.

        Raises:
            QueueStoreError: another live host owns it (nothing was taken).
            UnknownConversationError: no such conversation.
        """
        ...

    def disown(self, conversation_id: str) -> None:
        """Release this host's lease of the conversation, if it holds one."""
        ...

    def owns(self, conversation_id: str) -> bool:
        """True while this host holds the conversation's lease (as far as it knows)."""
        ...


EVENT_PAGE = 1000
"""How many log entries :func:`iter_events` reads at a time."""


def iter_events(
    store: Store, conversation_id: str, *, page: int = EVENT_PAGE
) -> Iterator[EventRecord]:
    """The conversation's whole event log, oldest first, read a page at a time: the log holds
    every update of every turn (a 50,000-chunk turn is 50,000 entries), so reading it whole
    costs memory in proportion to the history. Nothing is read until the first entry is
    asked for."""
    after = 0
    while True:
        entries = store.events(conversation_id, after, page)
        yield from entries
        if len(entries) < page:
            return
        after = entries[-1].id
