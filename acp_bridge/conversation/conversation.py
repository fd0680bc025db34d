"""A conversation: a durable FIFO queue of user messages fed to a supervised agent, one turn each.

The pieces: the :class:`QueueStore` (every message is committed before ``send`` returns), the
pure :class:`QueueMachine` (which message goes next and how each one ends), a
:class:`TurnDriver` (the turn itself, with the cancel grace window) and a
:class:`SupervisedAgent` (restarts that keep the session). This module performs what the
machine decides and reports back what happened; it holds no queue logic of its own. The turns
run in :mod:`.turns`, a task each; :mod:`.boundaries` commits and publishes their starts and
ends (with the reply and usage each turn leaves; :attr:`Conversation.usage` is the total).

Open one with :func:`acp_bridge.conversation.opening.open_conversation`.

Events go to subscribers as JSON-ready dicts, each with ``event`` and ``ts`` (the names of the
CLI's ``--json`` contract); :mod:`.fanout` says what happens to a slow subscriber. Turn
boundaries and lifecycle events are also written to the store's event log; the high-rate
``update`` events are not.

Permission decisions and closed tool calls are logged too (resuming checks the tool calls the
history used), in batches (see :mod:`.turn_events`).

Commits. Store calls go through a :class:`~.group_commit.GroupCommit` (a turn's end and the
next start can share one commit: see :mod:`.turns`). A send's commit and its queue step are one
step (under the conversation's lock), so a turn's end never falls between them.

Steering. ``send(content, steer=True)`` asks for the message to join the running turn, through
the agent's steering method, instead of waiting for the turn to end (issue 24). The message is
committed first (``steering``, or ``queued`` at the head when it cannot be steered now); the
machine decides, :mod:`.steers` performs the call and commits its end: ``steered`` (final, with
the seq of the turn it joined) or ``steer_fallback`` (queued at the head, with the reason), each
an event of its own. Never both, never twice: a steer whose answer never came (the bridge or the
agent died, or it timed out) ends failed, recoverable, "steer unconfirmed", and is never sent
again unless retried.

Stopping. :meth:`Conversation.shutdown` (run when :func:`open_conversation` exits, however it
exits) closes the queue, cancels the running turn, and waits, at most :attr:`stop_bound_s`, for
the turn to close and its final state (``cancelled``) to be committed and published. Only then
are the turn's tasks cancelled. A turn still open at the bound is cut and recorded cancelled
anyway: the store never keeps a message ``running`` after a clean stop, so a later resume does
not mistake a stop for a crash. :meth:`Conversation.stop_now` shortens that wait to
:data:`STOP_NOW_WAIT_S` (a second Ctrl-C).

Time. The conversation reads one clock, injected (``clock``, epoch seconds; a test passes a
fake one): every stored ``now``, every event's ``ts`` and each turn's ``duration_ms`` come from
it. Only the deadlines of cancel scopes are the event loop's, as anyio defines them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from acp_bridge.client.events import LifecycleEvent
from acp_bridge.client.session import Session, to_blocks
from acp_bridge.client.supervisor import SupervisedAgent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.client.turn_driver import TurnDriver
from acp_bridge.conversation.boundaries import TurnBoundaries
from acp_bridge.conversation.fanout import ConversationEvent, EventFanout
from acp_bridge.conversation.group_commit import GroupCommit
from acp_bridge.conversation.journal import LOG_BATCH, TurnJournal
from acp_bridge.conversation.publishing import EventPublisher
from acp_bridge.conversation.queue import QueueMachine
from acp_bridge.conversation.queue_model import (
    Action,
    CancelTurn,
    Failed,
    Idle,
    MessageFinal,
    ReviveAgent,
    StartTurn,
    SteerFallback,
    SteerTurn,
)
from acp_bridge.conversation.queue_states import MessageRecord, MessageState
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.steers import SteerResult, SteerRunner
from acp_bridge.conversation.store_api import Store
from acp_bridge.conversation.store_catalog import LogEntry
from acp_bridge.conversation.turn_events import TurnEvents
from acp_bridge.conversation.turns import TurnRunner
from acp_bridge.conversation.update_log import SoonFlusher
from acp_bridge.conversation.usage import UsageTotals
from acp_bridge.core.condition import Condition
from acp_bridge.errors import QueueStoreError, ResourceClosedError

__all__ = [
    "LOG_BATCH",
    "STOP_NOW_DEADLINE_S",
    "STOP_NOW_WAIT_S",
    "Conversation",
    "ConversationEvent",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

STOP_NOW_WAIT_S: Final = 0.25
"""After :meth:`Conversation.stop_now`, how long closing still waits for the turn to close."""
_RECORD_MARGIN_S: Final = 1.0
"""On top of the cancel and quarantine windows: the final commit and its event."""
_CUT_WAIT_S: Final = 1.0
"""How long a cut turn's task gets to leave (it only has its current commit to finish)."""
_CUT_ERROR: Final = "the turn did not close within the stop window; it was cut"
STOP_NOW_DEADLINE_S: Final = 1.0
"""After a second signal (``run``, ``chat``, ``serve``): the owner cancels everything not
shielded at this deadline at the latest, the stopped turns recorded by then."""


@dataclass
class _State:
    idle_reason: str | None = "drained"
    """Why no turn runs nor will start by itself; None while one may."""
    changed: Condition = field(default_factory=Condition)
    """Notified when ``idle_reason`` is set (an Idle action): :meth:`Conversation.wait_idle`."""


class Conversation:
    """Use :func:`acp_bridge.conversation.opening.open_conversation`."""

    def __init__(
        self,
        store: Store,
        record: ConversationRecord,
        agent: SupervisedAgent,
        session: Session,
        policy: TurnPolicy,
        task_group: TaskGroup,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.id = record.id
        self.agent = agent
        self.session = session
        self._store = store
        self._commits = GroupCommit(store)
        self._driver = TurnDriver(session, policy)
        self._clock = clock
        self._machine = QueueMachine()
        self._fanout = EventFanout()
        self._events = EventPublisher(
            self._fanout,
            clock=clock,
            log_event=self._log_event,
            session_moved=self._session_moved,
            name=record.id,
        )
        self._state = _State()
        self._journal = TurnJournal(record.usage, record.cost_meter)
        self._turn_events = TurnEvents(
            self._journal, self.emit, self._write_log, lambda: self._flusher.ring()
        )
        self._flusher = SoonFlusher(self._turn_events.flush_log, name=record.id)
        task_group.start_soon(self._flusher.run)
        self._acting = anyio.Lock()
        boundaries = TurnBoundaries(
            store,
            self._commits,
            record.id,
            journal=self._journal,
            events=self._events,
            emit=self.emit,
            structured_error=self.structured_error,
            clock=clock,
        )
        self._turns = TurnRunner(self, self._driver, boundaries, self._turn_events, task_group)
        self._steers = SteerRunner(
            self,
            session,
            store,
            self._commits,
            record.id,
            tasks=self._turns.tasks,
            task_group=task_group,
            prompts=self._turns.prompts,
            emit=self.emit,
            clock=clock,
        )
        self._hurry = False
        self._lease_lost = False
        self._closing_wait: anyio.CancelScope | None = None
        self._closed_on_purpose = False
        self._closed_announced = False

    # -- the caller's operations ----------------------------------------------------------

    async def send(self, content: Any, *, interrupt: bool = False, steer: bool = False) -> int:
        """Persist a message (committed before this returns) and queue it; returns its seq.

        With ``interrupt`` the running turn is cancelled (its message ends superseded) and this
        message goes next.

        With ``steer`` the message joins the running turn, through the agent's steering method,
        when the agent advertises one and a turn runs: the event ``steered`` says it did (the
        message ends ``steered``). Otherwise, or when the agent answers ``failed`` or
        ``promptRequired``, it goes to the head of the queue, a normal message, and the event
        ``steer_fallback`` says why. The steering call goes out after this returns; it is never
        both steered and prompted, nor sent twice.
        """
        if interrupt and steer:
            raise ValueError("send() takes interrupt or steer, not both")
        blocks = to_blocks(content)
        if steer:
            return await self._steer(blocks)
        # The commit and the queue step are one step of the conversation (under its lock): a
        # turn's end cannot fall between them. (Committing outside the lock let a turn that
        # failed and halted the queue, e.g. on an auth error, be followed by the queue step of a
        # send issued before that failure, which lifted the halt.)
        async with self._acting:
            if self._machine.is_closed:  # refused before anything is committed
                raise ResourceClosedError(f"{self.id}: send() after the conversation was closed")
            record = await self._db(
                self._store.add_message,
                self.id,
                blocks,
                next=interrupt,
                unpause=True,
                now=self._clock(),
            )
            # Committed: the message must reach the queue too, even if our caller is cancelled
            # meanwhile (else it would sit queued in the store, unknown to this process, and
            # its caller, not told its seq, might send it again).
            with anyio.CancelScope(shield=True):
                await self._take_committed_before(record.seq)
                self._turns.prompts[record.seq] = blocks
                await self.emit("queued", {"seq": record.seq, "interrupt": interrupt})
                await self._perform(self._machine.send(record.seq, interrupt=interrupt))
        return record.seq

    async def _steer(self, blocks: list[dict[str, Any]]) -> int:
        async with self._acting:  # one step, as for a send: see send()
            if self._machine.is_closed:
                raise ResourceClosedError(f"{self.id}: send() after the conversation was closed")
            unavailable = self._steers.unavailable() or self._machine.steer_unavailable()
            joinable = unavailable is None
            behind = () if joinable else self._machine.fallback_behind()
            record = await self._db(
                self._store.add_message,
                self.id,
                blocks,
                next=True,
                unpause=True,
                steering=joinable,
                behind=behind,
                now=self._clock(),
            )
            with anyio.CancelScope(shield=True):  # committed: see send()
                await self._take_committed_before(record.seq)
                self._turns.prompts[record.seq] = blocks
                await self.emit("queued", {"seq": record.seq, "interrupt": False, "steer": True})
                # What was decided before the commit stands (a message taken just above may
                # have started a turn meanwhile).
                actions = self._machine.steer(record.seq, unavailable=unavailable)
                first = actions[0]
                # What was committed is what the machine decided (one step, under the lock).
                assert isinstance(first, SteerTurn) == joinable, actions
                if isinstance(first, SteerFallback):
                    assert first.behind == behind, actions
                await self._perform(actions)
        return record.seq

    @property
    def steer_timeout_s(self) -> float:
        """How long a steer's answer is awaited before it counts as unconfirmed."""
        return self._steers.timeout_s

    @steer_timeout_s.setter
    def steer_timeout_s(self, value: float) -> None:
        self._steers.timeout_s = value

    async def stop(self) -> None:
        """Cancel the running turn (it ends cancelled) and pause the queue until
        :meth:`resume` or a new send."""
        async with self._acting:
            await self._db(self._store.update_conversation, self.id, paused=True, now=self._clock())
            await self._perform(self._machine.stop())

    async def resume(self) -> None:
        async with self._acting:
            await self._db(
                self._store.update_conversation, self.id, paused=False, now=self._clock()
            )
            await self._perform(self._machine.resume())

    async def retry(self, seq: int) -> None:
        """Send a cancelled, superseded or failed message again, explicitly."""
        async with self._acting:
            await self._db(
                self._store.requeue, self.id, seq, next=False, unpause=True, now=self._clock()
            )
            await self._perform(self._machine.retry(seq))

    async def take_sent_elsewhere(self) -> list[int]:
        """Queue the messages another host committed to a shared store (issue 23: its
        notification woke us): every queued message of the store this conversation has not
        seen, in seq order. Returns their seqs."""
        async with self._acting:
            if self._machine.is_closed:
                return []
            with anyio.CancelScope(shield=True):  # what is read is queued here, all of it
                taken = await self._take_committed_before(None)
            return taken

    async def _take_committed_before(self, seq: int | None) -> list[int]:
        """Queue the messages committed elsewhere (a shared store) with a seq below ``seq``
        (None: any) that this conversation has not seen, in seq order; under ``_acting``.

        A shared store numbers a conversation's messages under its row lock, so seq order is
        commit order: when this process commits message ``seq`` past its machine's next seq,
        the ones between were committed before it by other hosts, and their notifications
        may not have arrived yet. They are taken first, so FIFO holds across hosts and none
        is left behind (the machine accepts only increasing seqs)."""
        first = self._machine.next_seq
        if seq is not None and seq <= first:
            return []  # no gap: nothing was committed elsewhere meanwhile
        stored = await self._db(self._store.queued, self.id)
        known = {record.seq for record in self._machine.messages()}
        taken = []
        for message in sorted(stored, key=lambda m: m.seq):
            if message.seq in known or message.seq < first:
                continue
            if seq is not None and message.seq >= seq:
                break
            self._turns.prompts[message.seq] = list(message.content)
            await self.emit("queued", {"seq": message.seq, "interrupt": False})
            await self._perform(self._machine.send(message.seq))
            taken.append(message.seq)
        return taken

    async def close(self) -> None:
        """Close the conversation on purpose (``session/close``): no new turn starts from now
        on; a running turn is cancelled. Once nothing runs, the event ``conversation_closed``
        is published and logged (a watcher's last event). A shutdown alone (the owner
        exiting) closes without it."""
        self._closed_on_purpose = True
        await self.act(self._machine.close)

    async def steer_result(self, seq: int) -> SteerResult:
        """How steer ``seq`` (a ``send(..., steer=True)``) ended, once it did: steered,
        queued (why), or unconfirmed. The caller bounds the wait."""
        return await self._steers.result(seq)

    async def set_config_option(self, config_id: str, value: str | bool) -> None:
        """Choose one of the agent's config options for this conversation. The choice is
        stored, and applied again after an agent restart or when the conversation resumes."""
        await self.session.set_config_option(config_id, value)
        await self._store_choices()

    async def set_mode(self, mode_id: str) -> None:
        """Choose one of the agent's modes (legacy); stored and re-applied like a config."""
        await self.session.set_mode(mode_id)
        await self._store_choices()

    async def _store_choices(self) -> None:
        config = {"options": dict(self.session.config_choices), "mode": self.session.mode_id}
        await self._db(self._store.update_conversation, self.id, config=config, now=self._clock())

    def messages(self) -> list[MessageRecord]:
        return list(self._machine.messages())

    @property
    def usage(self) -> UsageTotals:
        """What the conversation's messages spent so far (stored ones included), and the
        latest context snapshot. Updated when each message reaches its final state."""
        return self._journal.usage

    async def wait_idle(self) -> str:
        """Wait until no turn runs and none will start by itself; returns why
        (``drained``, ``paused``, ``agent_gone``, ``closed``)."""
        while self._state.idle_reason is None:
            await self._state.changed.wait()
        return self._state.idle_reason

    def subscribe(
        self, *, replay: bool = False, lossless: bool | None = None
    ) -> MemoryObjectReceiveStream[ConversationEvent]:
        """Every event from now on; with ``replay``, first the latest event of each kind other
        than ``update`` (agent_started, session, ...), so a late subscriber knows where things
        stand.

        The first subscriber is the primary one and loses nothing: when it falls
        :data:`~.fanout.SUBSCRIBER_BUFFER` events behind, the turn waits for it (backpressure).
        Further subscribers (or ``lossless=False``) never slow the turn: one that falls that
        far behind is disconnected (its stream ends). See :mod:`.fanout`.
        """
        return self._fanout.subscribe(replay=replay, lossless=lossless)

    @property
    def stop_bound_s(self) -> float:
        """How long a stop may take to close the running turn and record it: the grace window,
        then the quarantine (the stuck agent killed, reaped and reported), plus a margin for
        writing the cancel and the final commit."""
        grace_s: float = self._driver.policy.timings.cancel_grace_s
        options = self.agent.options
        quarantine_s = options.shutdown.kill_wait_s + options.exit_report_timeout_s
        return grace_s + quarantine_s + 2 * _RECORD_MARGIN_S

    def stop_now(self) -> None:
        """Stop waiting for the running turn (a second Ctrl-C; kill the agent too). Closing
        then waits at most :data:`STOP_NOW_WAIT_S` for the turn to close, and records a turn
        still open as cancelled. Idempotent; never blocks."""
        self._hurry = True
        scope = self._closing_wait
        if scope is not None:
            scope.deadline = min(scope.deadline, anyio.current_time() + STOP_NOW_WAIT_S)

    def lease_lost(self) -> None:
        """The conversation's lease in a shared store is lost (issue 23): another host owns
        it now, and the store refuses every write of ours. The running turn is cut at once
        (its task cancelled); closing then records nothing and waits for nothing (the new
        owner finds the message running and ends it failed, recoverable). Never blocks."""
        self._lease_lost = True
        self.stop_now()
        for turn_scope in list(self._turns.tasks.scopes):
            turn_scope.cancel()

    async def shutdown(self) -> None:
        """Close, wait (bounded) for the running turn to close and be recorded, then cut what
        is left. :func:`open_conversation` runs it, shielded, when it exits."""
        if self._commits.failure is not None or self._lease_lost:
            # The store could not be written (a full disk, say): the running turn's end
            # cannot be recorded either, so it is not waited for, and a message left running
            # is found by the next run (failed, recoverable) as after a crash of the bridge.
            # A lost lease: the same, by the next owner.
            await self._shutdown_unrecorded()
            return
        await self.act(self._machine.close)
        bound = STOP_NOW_WAIT_S if self._hurry else self.stop_bound_s
        with anyio.move_on_after(bound) as scope:
            self._closing_wait = scope
            await self.wait_idle()
        self._closing_wait = None
        for turn_scope in list(self._turns.tasks.scopes):
            turn_scope.cancel()
        with anyio.move_on_after(_CUT_WAIT_S):
            await self._turns.tasks.wait_none_left()
        with anyio.move_on_after(_RECORD_MARGIN_S):
            await self._record_cut_turn()
        with anyio.move_on_after(_RECORD_MARGIN_S):
            await self._turn_events.flush_log()

    async def _shutdown_unrecorded(self) -> None:
        with contextlib.suppress(QueueStoreError), anyio.move_on_after(STOP_NOW_WAIT_S):
            await self.act(self._machine.close)  # may need a commit: tried, not waited for
        for turn_scope in list(self._turns.tasks.scopes):
            turn_scope.cancel()
        with anyio.move_on_after(_CUT_WAIT_S):
            await self._turns.tasks.wait_none_left()

    async def _record_cut_turn(self) -> None:
        seq = self._machine.running
        if seq is None:
            return
        log.warning("%s: message %d did not close in time; recording it cut", self.id, seq)
        failure = Failed(_CUT_ERROR, True)  # counts as cancelled: a stop or close was asked
        await self.act(lambda: self._machine.turn_ended(seq, failure))

    # -- performing what the machine decides --------------------------------------------

    async def start(
        self,
        records: list[MessageRecord],
        *,
        paused: bool,
        stored: ConversationRecord | None = None,
        prompts: dict[int, list[dict[str, Any]]] | None = None,
    ) -> None:
        """Load the stored queue (a message cut by a crash of the bridge ends failed,
        recoverable) and start the next message never prompted. ``stored``: the conversation
        as stored now, whose usage totals and cost meter this one continues; ``prompts``: the
        content of its queued messages, by seq (read with the queue, so a turn need not read
        its prompt from the store before it starts)."""
        self._turns.prompts.update(prompts or {})
        async with self._acting:
            if stored is not None:
                self._journal.continue_from(stored.usage, stored.cost_meter)
            self._machine, actions = QueueMachine.restore(records, paused=paused)
            await self._perform(actions)

    # -- what its turn tasks ask of it (turns.TurnOwner) ----------------------------------

    @property
    def queue(self) -> QueueMachine:
        """The queue machine now (:meth:`start` replaces it with the restored one)."""
        return self._machine

    @property
    def acting(self) -> anyio.Lock:
        """Held by one step of the conversation at a time."""
        return self._acting

    async def act(self, decide: Callable[[], list[Action]]) -> None:
        """Ask the machine and perform its answer, as one step: actions from different calls
        must not interleave (a start must not reach the store before the previous message's
        final state, nor a stale "idle" land after a start)."""
        async with self._acting:
            await self._perform(decide())

    async def _perform(self, actions: list[Action]) -> None:
        index = 0
        while index < len(actions):
            action = actions[index]
            index += 1
            if isinstance(action, StartTurn):
                self._busy()
                self._turns.begin(action, None)
            elif isinstance(action, CancelTurn):
                self._turns.cancel(action.reason)
            elif isinstance(action, ReviveAgent):
                await self.agent.revive()
            elif isinstance(action, SteerTurn):
                self._steers.begin(action)
            elif isinstance(action, SteerFallback):
                await self._steers.fell_back(action)
            elif isinstance(action, MessageFinal) and action.state is MessageState.STEERED:
                await self._steers.steered(action)
            elif isinstance(action, MessageFinal):
                after = actions[index] if index < len(actions) else None
                if isinstance(after, StartTurn) and self._turns.can_start_at_once(after):
                    self._busy()
                    await self._turns.finish_and_start(action, after)
                    index += 1
                else:
                    await self._turns.finish(action)
            elif isinstance(action, Idle):
                if action.reason == "closed":
                    await self._announce_closed()
                self._state.idle_reason = action.reason
                self._state.changed.notify_all()

    async def _announce_closed(self) -> None:
        if not self._closed_on_purpose or self._closed_announced:
            return
        self._closed_announced = True
        try:
            await self.emit("conversation_closed", {}, keep=True)
        except QueueStoreError as exc:  # the store failed: the shutdown reports it
            log.warning("%s: conversation_closed not logged: %s", self.id, exc)

    def _busy(self) -> None:
        self._state.idle_reason = None  # a turn task is on its way: not idle till an Idle action

    def structured_error(self, error: dict[str, Any], recoverable: bool | None) -> dict[str, Any]:
        """A structured error for callers: what happened, to which agent and session, and
        whether the next turn can proceed."""
        return {
            "code": error.get("code", "turn_failed"),
            "message": error.get("message", ""),
            "agent": self.agent.name,
            "sessionId": self.session.id,
            "recoverable": bool(recoverable),
        }

    # -- events (published in causal order: see :mod:`.publishing`) -------------------------

    def note_lifecycle(self, event: LifecycleEvent) -> None:
        self._events.note_lifecycle(event)

    async def forward_lifecycle(self) -> None:
        await self._events.forward_lifecycle()

    async def flush_lifecycle(self, *, final: bool = False) -> None:
        await self._events.flush_lifecycle(final=final)

    async def emit(
        self, name: str, data: dict[str, Any], *, seq: int | None = None, keep: bool = False
    ) -> None:
        """Publish an event (``keep``: also commit it to the event log first)."""
        await self._events.emit(name, data, seq=seq, keep=keep)

    def close_subscribers(self) -> None:
        self._events.close()
        self._flusher.close()

    async def flush_log(self) -> None:
        """Commit the turn's pending log entries now (a log reader wants everything so far:
        the host, before it asks its clients about a tool call)."""
        await self._turn_events.flush_log()

    @property
    def commits(self) -> GroupCommit:
        """The conversation's group commit: a reader of the event log waits on its ``changed``
        (and compares ``batches``) for entries committed since it last read."""
        return self._commits

    async def _write_log(self, entries: list[LogEntry]) -> None:
        await self._commits.add_events(self.id, entries, now=self._clock())

    async def _log_event(
        self, name: str, data: dict[str, Any], seq: int | None, now: float
    ) -> None:
        await self._turn_events.flush_log()  # what happened before it is logged before it
        await self._commits.add_event(self.id, name, data, seq=seq, now=now)

    async def _session_moved(self, new_session_id: str, now: float) -> None:
        await self._db(self._store.update_conversation, self.id, session_id=new_session_id, now=now)

    async def _db(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        # In a worker thread (a commit may fsync), committed together with the calls of other
        # tasks queued meanwhile: see :mod:`.group_commit`.
        return await self._commits.call(method, *args, **kwargs)
