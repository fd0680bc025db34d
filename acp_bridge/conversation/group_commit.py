"""Group commit: the store calls of async code, several to a commit, without blocking the loop.

A conversation makes a few store calls per message (the send, the start of its turn, its final
state), from different tasks. Each alone would be one transaction. :class:`GroupCommit` queues
the calls and commits everything queued together, inside one transaction: while one batch
commits in a worker thread, the calls arriving meanwhile wait and form the next one. Under load
(a thousand sends while turns run) most calls share a commit.

Where a batch runs: at once, in the event loop's thread, when the store can commit it without
waiting (:meth:`~.store.QueueStore.commit_now_if_free`: no fsync per commit, the store free
in this process, no other process writing; checkpoints run in a thread of their own). That is
the common case, and it saves a worker thread's round trip, which costs more than a queue
turn's statements. Otherwise, and to report a failure, the batch runs in a worker thread, where
waiting for the disk or for another process blocks nothing else.

Order: calls run in the order they were submitted, so a message's final state is committed no
later than anything submitted after it (the next message's start). Durability is the store's:
a call's result is returned only after the transaction holding it committed.

Failures: one failing call must not fail its neighbours. If any call of a batch raises, the
batch is rolled back and each of its calls runs again alone, in order, so each gets its own
result or its own error. (The store's calls only touch the database, so running one again after
a rollback is safe.)

No background task: the caller that finds no batch running commits the queue itself; when it is
done, the waiting callers are woken through one :class:`~acp_bridge.core.condition.Condition`
(:attr:`GroupCommit.changed`): those whose calls it committed return, and the first of the
callers queued meanwhile to run commits the next batch (the others see it committing and wait
again). Waiting is shielded, as :func:`anyio.to_thread.run_sync` is: a caller cancelled while
its call commits still gets the call's outcome and returns it, so a send never commits a
message its caller did not hear about.

Bound: calls are queued only by tasks awaiting them, one call per awaiting task (plus at most one
submitted without waiting, see :meth:`GroupCommit.submit`), so the queue is bounded by the tasks
of the conversation.

The event log: :meth:`GroupCommit.add_events` and :meth:`GroupCommit.add_event` append to the
conversation's log and, once committed, hand the entries with their ids to
:attr:`GroupCommit.log` (a reader follows the log from there, see :mod:`.update_log`); every
other call tells it that the log may have changed otherwise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import anyio

from acp_bridge.conversation.records import EventRecord
from acp_bridge.conversation.store_api import Store
from acp_bridge.conversation.store_catalog import LogEntry
from acp_bridge.conversation.update_log import CommittedLog
from acp_bridge.core.condition import Condition
from acp_bridge.errors import QueueStoreError

__all__ = ["GroupCommit", "PendingCommit"]

_T = TypeVar("_T")

Logged = Callable[[Any], "Sequence[EventRecord] | None"]
"""The log entries a committed call appended, from its result (None: not known)."""


class PendingCommit(Generic[_T]):
    """A store call queued in a :class:`GroupCommit`; :meth:`result` waits for its commit."""

    def __init__(self, owner: GroupCommit, run: Callable[[], _T]) -> None:
        self._owner = owner
        self._run = run
        self._value: _T | None = None
        # Until it runs: a batch cut short (the worker thread raised) leaves this error.
        self._error: BaseException | None = RuntimeError("the store call was never run")
        self.settled = False
        self.logged: Logged | None = None
        """Set for the calls that append to the event log (see :meth:`GroupCommit.add_events`)."""

    def __repr__(self) -> str:
        state = "queued" if not self.settled else "failed" if self.failed else "committed"
        return f"<PendingCommit [{state}]>"

    def execute(self) -> None:
        """Run the call (in the worker thread); keep its value or its error."""
        try:
            self._value = self._run()
            self._error = None
        except Exception as exc:  # handed to the caller by result()
            self._error = exc

    @property
    def failed(self) -> bool:
        return self._error is not None

    async def result(self) -> _T:
        """The call's value once committed, or its error raised here."""
        owner = self._owner
        declined = False
        if not self.settled and not owner.committing:
            declined = not owner.commit_now()  # the common case: no wait, nothing to shield
        if not self.settled:
            with anyio.CancelScope(shield=True):
                while not self.settled:
                    if not owner.committing:
                        # Just declined: straight to the worker thread, not a second try here.
                        await owner.commit_queued(try_now=not declined)
                        declined = False
                        continue
                    await owner.changed.wait()
        if self._error is not None:
            if isinstance(self._error, QueueStoreError) and owner.failure is None:
                owner.failure = self._error
            raise self._error
        return self._value  # type: ignore[return-value]  # settled without error: set


class GroupCommit:
    """Queued store calls of one store, committed in batches."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._queued: deque[PendingCommit[Any]] = deque()
        self.committing = False
        self.changed = Condition()
        """Notified when a batch has settled its calls: their callers return, and one of the
        callers queued meanwhile commits the next batch."""
        self.batches = 0
        """How many commits (on the loop's thread or a worker's) the calls took so far."""
        self.failure: QueueStoreError | None = None
        """The first store error a call raised (a full disk, the store replaced): from then on
        nothing its caller would record can be trusted to be stored."""
        self.log = CommittedLog()
        """What the calls committed to the event log, for a reader following it."""

    def submit(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> PendingCommit[_T]:
        """Queue ``method(*args, **kwargs)`` without waiting; await :meth:`PendingCommit.result`
        (always: it is what commits the queue when nothing else is committing)."""
        call = PendingCommit(self, lambda: method(*args, **kwargs))
        self._queued.append(call)
        return call

    async def call(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run ``method(*args, **kwargs)`` in a committed batch and return its result."""
        return await self.submit(method, *args, **kwargs).result()

    async def add_events(
        self, conversation_id: str, entries: Sequence[LogEntry], *, now: float
    ) -> None:
        """``store.add_events`` in a committed batch; the entries go to :attr:`log`."""
        listed = list(entries)

        def logged(ids: Sequence[int] | None) -> list[EventRecord] | None:
            if ids is None or len(ids) != len(listed):
                return None
            return [
                EventRecord(
                    id=ident, conversation_id=conversation_id, ts=now, seq=seq, kind=kind, data=data
                )
                for ident, (kind, data, seq) in zip(ids, listed, strict=True)
            ]

        call = self.submit(self._store.add_events, conversation_id, listed, now=now)
        call.logged = logged
        await call.result()

    async def add_event(
        self, conversation_id: str, kind: str, data: Any, *, seq: int | None = None, now: float
    ) -> int:
        """``store.add_event`` in a committed batch (its id); the entry goes to :attr:`log`."""

        def logged(ident: int) -> list[EventRecord]:
            entry = EventRecord(
                id=ident, conversation_id=conversation_id, ts=now, seq=seq, kind=kind, data=data
            )
            return [entry]

        call = self.submit(self._store.add_event, conversation_id, kind, data, seq=seq, now=now)
        call.logged = logged
        return await call.result()

    def commit_now(self) -> bool:
        """Commit every queued call at once, in this thread, if the store can without waiting
        (see :meth:`~.store.QueueStore.commit_now_if_free`); False leaves them queued."""
        calls = list(self._queued)
        if not self._store.commit_now_if_free(partial(self._run_all_or_nothing, calls)):
            return False
        self._queued.clear()  # no one could queue more meanwhile: nothing awaited
        self._settle(calls)
        return True

    async def commit_queued(self, *, try_now: bool = True) -> None:
        """Commit every queued call: at once in this thread when the store can commit without
        waiting (unless ``try_now`` is False), else in one worker-thread trip; then wake the
        callers queued meanwhile, so one of them commits the next batch."""
        if try_now and self.commit_now():
            return
        calls = list(self._queued)
        self._queued.clear()
        self.committing = True
        try:
            await anyio.to_thread.run_sync(self._run_batch, calls)
        finally:
            self.committing = False
            # Any of the callers queued meanwhile may commit the next batch: the first to run
            # does, the others see it committing and wait again.
            self._settle(calls)

    def _settle(self, calls: list[PendingCommit[Any]]) -> None:
        self.batches += 1
        for call in calls:
            call.settled = True
            if call.logged is None:
                self.log.committed(None)  # it may have written to the log
            elif not call.failed:  # a failed call kept nothing
                self.log.committed(call.logged(call._value))
        self.changed.notify_all()

    @staticmethod
    def _run_all_or_nothing(calls: list[PendingCommit[Any]]) -> bool:
        """Inside the store's transaction: True if every call succeeded (commit them), False at
        the first failure (roll back; :meth:`_run_batch` will run them again one by one)."""
        for call in calls:
            call.execute()
            if call.failed:
                return False
        return True

    def _run_batch(self, calls: list[PendingCommit[Any]]) -> None:
        if len(calls) == 1:
            calls[0].execute()
            return
        try:
            with self._store.batch(f"commit {len(calls)} changes together"):
                for call in calls:
                    call.execute()
                    if call.failed:
                        raise _BatchFailed
        except Exception:  # _BatchFailed, or the commit itself: nothing of it was kept
            for call in calls:
                call.execute()


class _BatchFailed(Exception):
    """One call of a batch failed: roll the batch back and run its calls one by one."""
