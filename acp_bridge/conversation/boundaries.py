"""A turn's two boundaries, committed and published: its start (the message recorded
``running``, then ``turn_started``) and its end (the message's final state, then
``turn_ended`` or ``turn_failed``).

What each turn leaves for the transcript (the agent's reply text, bounded) and what it spent
(see :mod:`.usage`: tokens from the prompt response, cost by growth of the session's
cumulative cost) are stored with the message's final state, in the same commit, so they are
counted once; ``turn_ended`` and ``turn_failed`` carry the turn's ``usage``. The turn's batched
log entries (see :mod:`.turn_events`) go into that commit too.

Queuing a commit and waiting for it are separate steps (:meth:`TurnBoundaries.submit_final`,
then :meth:`TurnBoundaries.finished`), so a message's final state and the next message's start
can be queued together and land in one commit (see :mod:`.turns`). No state of its own but the
running turn's start time (for ``duration_ms``): the usage totals are the
:class:`~.journal.TurnJournal`'s, the commits the :class:`~.group_commit.GroupCommit`'s.

Time is the conversation's clock (injected: see :class:`~.conversation.Conversation`), for the
stored ``now`` and for ``duration_ms`` alike, so a turn's duration is the distance between the
times it was stamped with. A clock stepped back during a turn gives a duration of 0, never a
negative one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from acp_bridge.conversation.group_commit import GroupCommit, PendingCommit
from acp_bridge.conversation.journal import FinalEvent, StructuredError, TurnJournal, final_event
from acp_bridge.conversation.publishing import EventPublisher
from acp_bridge.conversation.queue_model import MessageFinal
from acp_bridge.conversation.records import FinishedTurn
from acp_bridge.conversation.store_api import Store
from acp_bridge.conversation.turn_events import Emit

__all__ = ["SubmittedFinal", "TurnBoundaries", "started_event"]


SubmittedFinal = tuple[PendingCommit[bool], FinishedTurn | None, FinalEvent]
"""A final state queued for commit: the store call, the turn it records, the event to publish."""


def started_event(seq: int, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    text = " ".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    return {"seq": seq, "text": text}


class TurnBoundaries:
    def __init__(
        self,
        store: Store,
        commits: GroupCommit,
        conversation_id: str,
        *,
        journal: TurnJournal,
        events: EventPublisher,
        emit: Emit,
        structured_error: StructuredError,
        clock: Callable[[], float],
    ) -> None:
        self.id = conversation_id
        self._store = store
        self._commits = commits
        self._journal = journal
        self._events = events
        self._emit = emit
        self._structured_error = structured_error
        self._clock = clock
        self._turn_started_at: tuple[int, float] | None = None  # (seq, the clock's time)

    async def stored_prompt(self, seq: int) -> list[dict[str, Any]]:
        """The content of message ``seq`` as stored (not sent in this process)."""
        record = await self._commits.call(self._store.get_message, self.id, seq)
        return list(record.content) if record is not None else []

    # -- the start ------------------------------------------------------------------------

    def submit_running(self, seq: int, started_event: dict[str, Any]) -> PendingCommit[bool]:
        """Queue the commit recording ``seq`` running, its ``turn_started`` logged with it."""
        return self._commits.submit(
            self._store.mark_running,
            self.id,
            seq,
            now=self._clock(),
            event=("turn_started", started_event),
        )

    async def began(self, seq: int, started_event: dict[str, Any]) -> None:
        """The start of ``seq`` is committed: publish it, and hold lifecycle events that
        happen during its turn behind its final event."""
        self._journal.turn_started(seq)
        self._turn_started_at = (seq, self._clock())
        self._events.turn_started(seq)
        await self._emit("turn_started", started_event)

    # -- the end --------------------------------------------------------------------------

    def submit_final(self, final: MessageFinal) -> SubmittedFinal:
        """Queue the final state's commit (with the turn's batched log and its end event)."""
        turn = self._journal.take_turn(final.seq)
        started = self._turn_started_at
        duration_ms = 0.0  # a message that never started here, not the last turn's duration
        if started is not None and started[0] == final.seq:
            duration_ms = max(0.0, self._clock() - started[1]) * 1000
        end = final_event(final, turn, duration_ms, self._structured_error)
        call = self._commits.submit(
            self._store.finish,
            self.id,
            final.seq,
            end.state,
            stop_reason=final.stop_reason,
            error=end.error,
            recoverable=final.recoverable,
            now=self._clock(),
            log=self._journal.take_log(),  # the turn's batched entries and its end: one commit
            event=(end.name, end.data),
            turn=turn,
        )
        return call, turn, end

    async def finished(self, final: MessageFinal, submitted: SubmittedFinal) -> None:
        """Wait for the final state's commit; then count the turn and publish its end, unless
        the message was final already (the store changed nothing)."""
        call, turn, end = submitted
        changed = await call.result()
        if changed and turn is not None:
            self._journal.settled(turn)
        if changed:
            await self._emit(end.name, end.data)
        self._events.turn_final(final.seq)
