"""The conversations a host (or a ``run``/``chat`` owner) serves, and their clients.

A :class:`ConversationHub` is one conversation as its clients see it: the ACP clients attached
to it, the watchers, the prompts waiting for their turn to end, the permission requests being
asked. What every client sees comes from the conversation's event log, committed (see
:mod:`acp_bridge.conversation.update_log`): the hub's tail (:meth:`ConversationHub.live`) takes
each batch of entries the conversation's group commit just committed, in memory (it reads the
store instead when the commit cannot tell what was logged: a turn's start or end, a store that
does not report ids), encodes each notification once (an agent's update is not encoded again:
its text, kept when it was logged, is spliced into the line) and puts it in every client's
outbox (:mod:`.clients`), never waiting for a client. A client attaching with a cursor is first
sent the entries after its cursor, up to the hub's head, then joins the live clients: the log's
ids make that never twice, never a gap.

In the host, :class:`HostConversation` adds the running part: the supervised agent and the
open :class:`~acp_bridge.conversation.conversation.Conversation`, started on first use and
stopped after ``agent_idle_s`` with nothing to do (the next use starts the agent again and
restores its session). The hub holds the conversation's owner lock while it is open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import anyio
from anyio.abc import TaskGroup

from acp_bridge.client.elicitation import ElicitationHandler
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.records import ConversationRecord, EventRecord, UpdateData
from acp_bridge.conversation.store_api import Store
from acp_bridge.core.condition import Condition
from acp_bridge.errors import BridgeError, QueueStoreError, RpcError
from acp_bridge.host.clients import Client
from acp_bridge.host.log_view import SENDER_KIND, SenderLabels, acp_update, watch_event
from acp_bridge.host.owner import conversation_owner
from acp_bridge.host.status_rows import queue_status, stored_queue_status
from acp_bridge.process.spec import AgentSpec
from acp_bridge.wire import jsonrpc
from acp_bridge.wire.elicitation import ElicitationRequest, ElicitationResponse

__all__ = [
    "ConversationHub",
    "HostConversation",
    "HostSettings",
    "TurnResult",
]

log = logging.getLogger(__name__)

_READ_BATCH: Final = 512
"""Log entries read at once (by the tail, or for a client catching up)."""
_CATCH_UP_BYTES_FREE: Final = 4 * 1024 * 1024
"""A client catching up gets more history once its outbox has this much room."""

SpecFor = Callable[[ConversationRecord], AgentSpec]
OptionsFor = Callable[[PermissionPolicy], ClientOptions]


@dataclass(frozen=True)
class HostSettings:
    """How the host runs each conversation's agent (the CLI builds it from its flags)."""

    spec_for: SpecFor
    """The agent command of a conversation (its stored one, or the host's default)."""
    options_for: OptionsFor
    """The supervised agent's options, with the permission policy the hub gives."""
    policy: TurnPolicy = field(default_factory=TurnPolicy)
    permission: PermissionMode = PermissionMode.DENY
    """Who answers a permission request no client answers."""
    agent_idle_s: float | None = None
    """Stop an agent with nothing to do after this long (None: never)."""


@dataclass
class TurnResult:
    """How a prompt's turn ended: its final log entry (``turn_ended`` or ``turn_failed``)."""

    kind: str
    data: dict[str, Any]
    marks: dict[int, int] = field(default_factory=dict)
    """Each live client's outbox mark when the turn's end was read."""

    def answer(self) -> dict[str, Any]:
        """The ``session/prompt`` result, or raise the turn's failure as an RpcError."""
        if self.kind == "turn_failed":
            error = self.data.get("error") or {}
            message = str(error.get("message") or "the turn failed")
            raise RpcError(-32603, message, {"acpBridge": self.data})
        return {"stopReason": str(self.data.get("stopReason", "end_turn"))}


class ConversationHub:
    """One conversation as its clients see it (see the module's text)."""

    def __init__(self, store: Store, conversation_id: str) -> None:
        self.id = conversation_id
        self.store = store
        self.attached: dict[int, Client] = {}
        self.watchers: dict[int, Client] = {}
        self.head = store.last_event_id(conversation_id)
        self.changed = Condition()
        """Notified when the head moves or the conversation opens or closes."""
        self.conversation: Conversation | None = None
        self._labels = SenderLabels()
        self._waiters: dict[int, TurnResult | None] = {}
        self._last_event = 0.0
        self._update_head = _update_head(conversation_id)

    # -- clients -------------------------------------------------------------------------

    async def attach(self, client: Client, cursor: int | None, *, watch: bool) -> int:
        """Send ``client`` the entries after ``cursor`` (None: none, it joins at the head),
        then make it live. Returns the cursor it joined at."""
        position = self.head if cursor is None else max(0, cursor)
        while position < self.head:
            await client.outbox.wait_room(_CATCH_UP_BYTES_FREE)
            if client.cut_reason is not None:
                return position
            entries = await anyio.to_thread.run_sync(
                self.store.events, self.id, position, _READ_BATCH
            )
            for entry in entries:
                if entry.id > self.head:
                    break  # the tail delivers it once the client is live
                self._replay_one(client, entry, watch=watch)
                position = entry.id
            if not entries:
                break
        if client.cut_reason is not None:
            return position  # cut off meanwhile: it is not made live
        (self.watchers if watch else self.attached)[client.number] = client
        (client.watching if watch else client.sessions).add(self.id)
        self.changed.notify_all()
        return position

    def detach(self, client: Client) -> None:
        self.attached.pop(client.number, None)
        self.watchers.pop(client.number, None)
        client.sessions.discard(self.id)
        client.watching.discard(self.id)
        self.changed.notify_all()

    def unwatch(self, client: Client) -> None:
        self.watchers.pop(client.number, None)
        client.watching.discard(self.id)

    @property
    def clients(self) -> int:
        return len(set(self.attached) | set(self.watchers))

    @property
    def last_event(self) -> float:
        return self._last_event

    def _replay_one(self, client: Client, entry: EventRecord, *, watch: bool) -> None:
        if watch:
            client.send("_acp_bridge/event", _watch(self.id, entry))
            return
        self._labels.see(entry.kind, entry.data)
        label = None
        if entry.kind == "turn_started" and isinstance(entry.seq, int):
            label = self._labels.take(entry.seq)[1]
        params = acp_update(self.id, entry.kind, entry.data, label)
        if params is not None:
            client.send("session/update", params)

    # -- the live tail -------------------------------------------------------------------

    async def live(self, conversation: Conversation) -> None:
        """Deliver the log's new entries to the clients while ``conversation`` is open (run it
        as a task; cancel it when the conversation closes, then call :meth:`catch_up`).

        The entries come from the conversation's group commit as it commits them
        (:class:`~acp_bridge.conversation.update_log.CommittedLog`); when it cannot tell what
        was logged, from the store, read after the head until nothing is left."""
        self.conversation = conversation
        self.changed.notify_all()
        commits = conversation.commits
        committed = commits.log
        committed.follow()
        while True:
            seen = commits.batches
            entries = committed.take()
            if entries is None:
                try:
                    read = await self._read_log()
                except QueueStoreError as exc:  # the conversation reports it (and stops) itself
                    log.debug("%s: the event log cannot be read: %s", self.id, exc)
                    return
                if read is None or read == _READ_BATCH:  # the store's end not reached yet
                    committed.read_again()
                    continue
            else:
                head = self.head
                fresh = [entry for entry in entries if entry.id > head]  # not read already
                if fresh:
                    self._deliver(fresh)
                    self.changed.notify_all()
            if commits.batches == seen:
                await commits.changed.wait()

    async def catch_up(self) -> bool:
        """Deliver the entries committed since the head (read from the store, a batch at
        most); False when there were none."""
        return await self._read_log() != 0

    async def _read_log(self) -> int | None:
        """Read the entries after the head from the store and deliver them: how many (fewer
        than :data:`_READ_BATCH`: the store's end was reached), None when the head moved
        meanwhile (read again from there)."""
        head = self.head
        entries = await anyio.to_thread.run_sync(self.store.events, self.id, head, _READ_BATCH)
        if self.head != head:
            return None
        self._deliver(entries)
        if entries:
            self.changed.notify_all()
        return len(entries)

    def closed(self, why: str | None = None) -> None:
        """The conversation closed (its agent stopped): waiting prompts end with it, told
        ``why`` when it stopped on a failure (the store could not be written, the agent could
        not be started)."""
        self.conversation = None
        message = "the conversation was closed" if why is None else why
        for seq, result in list(self._waiters.items()):
            if result is None:
                failure = {"message": message, "recoverable": True}
                self._waiters[seq] = TurnResult("turn_failed", {"seq": seq, "error": failure})
        self.changed.notify_all()

    def _deliver(self, entries: list[EventRecord]) -> None:
        """Fan ``entries`` out: each notification encoded once, and each client's share of the
        batch put in its outbox as one piece (one bound check, one wake-up per client, not per
        line), in log order."""
        lines: list[_Fanned] = []
        for entry in entries:
            self.head = entry.id
            self._last_event = entry.ts
            kind, data, seq = entry.kind, entry.data, entry.seq
            self._labels.see(kind, data)
            sender, label = None, None
            if kind == "turn_started" and isinstance(seq, int):
                sender, label = self._labels.take(seq)
            update = event = None
            if self.attached:
                update = self._update_line(kind, data, label)
            if self.watchers:
                event = _line("_acp_bridge/event", _watch(self.id, entry))
            if update is not None or event is not None:
                lines.append(_Fanned(update, sender, event))
            if kind in ("turn_ended", "turn_failed") and seq in self._waiters:
                self._put_all(lines)  # the marks count everything up to this entry
                lines = []
                marks = {n: c.outbox.put_count for n, c in self.attached.items()}
                self._waiters[seq] = TurnResult(kind, dict(data), marks)
        self._put_all(lines)

    def _update_line(self, kind: str, data: Any, label: str | None) -> bytes | None:
        """The ``session/update`` line of a log entry, or None. An agent's update logged in
        this process is spliced in as the store encoded it, not encoded again."""
        text = data.update_json if kind == "update" and isinstance(data, UpdateData) else None
        if text is not None and isinstance(data["update"], dict):
            with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate: encode below
                return self._update_head + text.encode() + b"}}\n"
        params = acp_update(self.id, kind, data, label)
        return None if params is None else _line("session/update", params)

    def _put_all(self, lines: list[_Fanned]) -> None:
        if not lines:
            return
        senders = {line.sender for line in lines if line.sender is not None}
        shared_updates = shared_events = None
        for number in list(self.attached.keys() | self.watchers.keys()):
            client = self.attached.get(number) or self.watchers[number]
            updates, events = number in self.attached, number in self.watchers
            if updates and not events and number not in senders:
                if shared_updates is None:
                    shared_updates = b"".join(x.update for x in lines if x.update is not None)
                data = shared_updates
            elif events and not updates:
                if shared_events is None:
                    shared_events = b"".join(x.event for x in lines if x.event is not None)
                data = shared_events
            else:  # its own prompt left out, or attached and watching: one by one, in order
                data = b"".join(x.for_client(number, updates=updates, events=events) for x in lines)
            if data:
                client.put(data)

    # -- messages ------------------------------------------------------------------------

    async def send(
        self,
        content: Any,
        *,
        client: Client | None,
        label: str | None,
        interrupt: bool = False,
        steer: bool = False,
        wait: bool = False,
    ) -> int:
        """Commit a message to the open conversation (its seq); with ``wait``, a waiter for
        its turn's end is registered before anything can end it. ``steer``: see
        :meth:`Conversation.send` (and :mod:`.steering`)."""
        conversation = self.conversation
        if conversation is None:
            raise RpcError(-32603, f"conversation {self.id} is not open")
        try:
            seq = await conversation.send(content, interrupt=interrupt, steer=steer)
        except QueueStoreError as exc:
            raise RpcError(
                -32603,
                f"the message was not stored: {exc}. Once the store can be written again "
                "(free space, fix its permissions), send it again",
            ) from exc
        if wait:
            self._waiters.setdefault(seq, None)
        name = label or (client.label if client is not None else None)
        if name:
            self._labels.note(seq, None if client is None else client.number, name)
            with contextlib.suppress(BridgeError):
                data = {"seq": seq, "label": name}
                await conversation.emit(SENDER_KIND, data, seq=seq, keep=True)
        return seq

    async def wait_turn(self, seq: int, client: Client | None) -> TurnResult:
        """Wait for the end of message ``seq``'s turn (registered by :meth:`send`), and for
        ``client``'s outbox to hand over everything the turn showed it."""
        self._waiters.setdefault(seq, None)
        try:
            while (result := self._waiters.get(seq)) is None:
                await self.changed.wait()
        finally:
            self._waiters.pop(seq, None)
        if client is not None and client.number in result.marks:
            await client.outbox.wait_handed(result.marks[client.number])
        return result

    async def cancel(self) -> tuple[bool, int | None]:
        """Cancel the running turn (the grace window applies); the queue goes on."""
        conversation = self.conversation
        if conversation is None:
            return False, None
        running = conversation.queue.running
        if running is None:
            return False, None
        await conversation.stop()
        await conversation.resume()
        return True, running

    # -- questions from the agent ----------------------------------------------------------

    async def ask_permission(self, request: Any, fallback: PermissionMode) -> str | None:
        """Ask every attached client that can answer; the first answer wins, the others'
        requests are cancelled. No client (or none answered): the host's ``fallback``."""
        params = request.dump()
        params["sessionId"] = self.id
        answer = await self._ask_clients(
            "session/request_permission", params, lambda client: client.answers_permissions
        )
        if answer is not _NO_ANSWER:
            return _option_id(answer)
        mode = PermissionMode.DENY if fallback is PermissionMode.ASK else fallback
        _, decision = await PermissionPolicy(mode).decide_with_record(request)
        return decision.option_id

    async def ask_elicitation(self, request: ElicitationRequest) -> ElicitationResponse:
        """Ask every attached client that advertised the request's mode, as a permission
        request is asked (the first answer wins, the others are cancelled). No client able to
        answer, or none answered: ``decline``. A request-scoped elicitation (no session) is
        not a conversation's: declined."""
        if request.session_id is None:
            return ElicitationResponse.decline()
        params = request.dump()
        params["sessionId"] = self.id
        answer = await self._ask_clients(
            "elicitation/create", params, lambda client: request.mode in client.elicitation_modes
        )
        if answer is _NO_ANSWER:
            return ElicitationResponse.decline()
        try:
            return ElicitationResponse.parse(answer)
        except ValueError:  # pydantic's ValidationError included
            log.info("%s: a client's elicitation answer is malformed; declining", self.id)
            return ElicitationResponse.decline()

    def elicitation_complete(self, params: dict[str, Any]) -> None:
        """``elicitation/complete`` from the agent: to every attached client (a client
        ignores an id it does not know)."""
        for client in list(self.attached.values()):
            client.send("elicitation/complete", params)

    async def _ask_clients(
        self, method: str, params: dict[str, Any], can_answer: Callable[[Client], bool]
    ) -> Any:
        """The one way a question goes to the clients: those ``can_answer`` picks first see
        the updates so far, then are asked at once; the first answer (``_NO_ANSWER``: none)."""
        askers = [c for c in self.attached.values() if can_answer(c)]
        if not askers:
            return _NO_ANSWER
        conversation = self.conversation
        if conversation is not None:
            # The clients first see the updates so far (the tool call it is about).
            with contextlib.suppress(QueueStoreError):
                await conversation.flush_log()
                while await self.catch_up():
                    pass
        return await _first_answer(askers, method, params)


class _Fanned(NamedTuple):
    """One log entry as the clients are fed it: the ``session/update`` line for the attached
    clients (but its ``sender``), the ``_acp_bridge/event`` line for the watchers. (A named
    tuple: one is made per entry, and it costs half what a frozen dataclass does.)"""

    update: bytes | None
    sender: int | None
    event: bytes | None

    def for_client(self, number: int, *, updates: bool, events: bool) -> bytes:
        mine = self.update if updates and self.update is not None and number != self.sender else b""
        return mine + (self.event if events and self.event is not None else b"")


_NO_ANSWER: Final = object()


async def _first_answer(askers: list[Client], method: str, params: dict[str, Any]) -> Any:
    """The first successful answer of ``askers`` to ``method``; the other calls are cancelled
    (each peer sends ``$/cancel_request`` for its call). ``_NO_ANSWER`` if none answered."""
    winner: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def ask(client: Client) -> None:
            await client.outbox.wait_handed(client.outbox.put_count)  # its updates go first
            try:
                answer = await client.peer.request(method, params)
            except BridgeError:
                return  # this client cannot answer (gone, or it refused): the others may
            if not winner:
                winner.append(answer)
                tg.cancel_scope.cancel()

        for client in askers:
            tg.start_soon(ask, client)
    return winner[0] if winner else _NO_ANSWER


def _option_id(answer: Any) -> str | None:
    outcome = answer.get("outcome") if isinstance(answer, dict) else None
    if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
        option = outcome.get("optionId")
        return option if isinstance(option, str) else None
    return None


def _line(method: str, params: Any) -> bytes:
    return jsonrpc.encode_message(jsonrpc.notification(method, params))


def _update_head(conversation_id: str) -> bytes:
    """A ``session/update`` line of ``conversation_id`` up to its ``update`` (``_line`` gives
    the same bytes for the whole line)."""
    line = _line("session/update", {"sessionId": conversation_id, "update": None})
    head, tail = line.rsplit(b"null", 1)
    assert tail == b"}}\n"
    return head


def _watch(conversation_id: str, entry: EventRecord) -> dict[str, Any]:
    return watch_event(conversation_id, entry.id, entry.kind, entry.ts, entry.data)


class HostConversation:
    """A conversation the host owns: its hub, and its agent while it runs."""

    def __init__(
        self, store: Store, store_path: Any, record: ConversationRecord, settings: HostSettings
    ) -> None:
        self.record = record
        self.hub = ConversationHub(store, record.id)
        self._store = store
        self._settings = settings
        self._owner = conversation_owner(store, store_path, record.id)
        self._owned = False
        self._stop = anyio.Event()
        self._running = False
        self._failure: BaseException | None = None
        self._shut = False
        self._agent: SupervisedAgent | None = None
        self.closed_on_purpose = False
        self.agent_pid: int | None = None
        self.agent_state = "stopped"

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def conversation(self) -> Conversation | None:
        return self.hub.conversation

    @property
    def starting(self) -> bool:
        """Its agent is starting (or its conversation opening): not open yet."""
        return self._running and self.hub.conversation is None

    def claim(self) -> None:
        """Take the conversation's owner lock (held until :meth:`release`).

        Raises:
            ConversationBusyError: another process owns it.
            UnsafeFileError, OSError: the lock file could not be used.
        """
        if not self._owned:
            self._owner.acquire()
            self._owned = True

    def release(self) -> None:
        if self._owned:
            self._owner.release()
            self._owned = False

    async def ensure_open(self, task_group: TaskGroup) -> Conversation:
        """The open conversation; its agent is started (and its session restored) if it was
        stopped. Raises the reason it could not start (as an RpcError)."""
        if self.hub.conversation is None and not self._running:
            if self._shut:
                raise RpcError(-32603, f"conversation {self.id} is not open: the host is stopping")
            self._running = True
            self._failure = None
            self._stop = anyio.Event()
            task_group.start_soon(self._run)
        while self.hub.conversation is None:
            if not self._running:
                failure = self._failure
                raise RpcError(-32603, f"conversation {self.id} could not start: {failure}")
            await self.hub.changed.wait()
        return self.hub.conversation

    def stop(self) -> None:
        """Stop the agent (the conversation stays in the store; the next use reopens it)."""
        self._stop.set()

    def shut(self) -> None:
        """Stop the agent for good (the host is stopping): nothing opens it again here."""
        self._shut = True
        self.stop()

    def stop_now(self) -> None:
        """As :meth:`shut`, without waiting for the running turn (a second signal): the
        agent's tree is killed, and the turn recorded cancelled at once. Never blocks."""
        self.shut()
        if self._agent is not None:
            self._agent.kill_now()
        conversation = self.hub.conversation
        if conversation is not None:
            conversation.stop_now()

    def lease_lost(self) -> None:
        """Its lease in a shared store was lost (another host owns it now): the running turn
        is cut at once and the agent stopped; nothing more is written."""
        conversation = self.hub.conversation
        if conversation is not None:
            conversation.lease_lost()
        self.stop()

    async def wait_stopped(self) -> None:
        """Return once the conversation is closed and its agent stopped."""
        while self._running or self.hub.conversation is not None:
            await self.hub.changed.wait()

    async def _run(self) -> None:
        settings = self._settings
        policy = PermissionPolicy(
            PermissionMode.ASK,
            ask=lambda request: self.hub.ask_permission(request, settings.permission),
        )
        try:
            fresh = await anyio.to_thread.run_sync(self._store.get_conversation, self.id)
            if fresh is None:
                raise ValueError(f"conversation {self.id} was removed from the store")
            self.record = fresh  # its session id as the last agent left it
            spec = settings.spec_for(self.record)
            self.agent_state = "starting"
            # Elicitations go to the attached clients that answer them, else are declined:
            # the host can always answer, so it advertises both modes (docs/elicitation.md).
            hub = self.hub
            asking = ElicitationHandler(hub.ask_elicitation, on_complete=hub.elicitation_complete)
            options = dataclasses.replace(settings.options_for(policy), elicitation=asking)
            async with open_supervised_agent(spec, options) as agent:
                self._agent = agent
                self.agent_pid = agent.pid
                async with open_conversation(
                    self._store, agent, self.record, policy=settings.policy
                ) as conversation:
                    self.agent_state = "running"
                    if self._store.is_shared:
                        # Issue 23: what another host committed while this one was opening
                        # (after the queue was read; its notification found nothing open).
                        # Open first, so that each later notification finds it.
                        self.hub.conversation = conversation
                        await conversation.take_sent_elsewhere()
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self.hub.live, conversation)
                        tg.start_soon(self._idle_stop, conversation)
                        await self._stop.wait()
                        tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    while await self.hub.catch_up():
                        pass
        except (BridgeError, OSError, ValueError) as exc:
            self._failure = exc
            log.warning("%s: %s", self.id, exc)
        except Exception as exc:  # one conversation's failure must not end the host
            self._failure = exc
            log.exception("%s: the conversation failed", self.id)
        finally:
            self.agent_state = "stopped"
            self._agent = None
            self.agent_pid = None
            self._running = False
            self.hub.closed(_stopped_by(self._failure))

    async def _idle_stop(self, conversation: Conversation) -> None:
        idle_s = self._settings.agent_idle_s
        if idle_s is None:
            return
        while True:
            await conversation.wait_idle()
            with anyio.move_on_after(idle_s):
                await _busy_again(conversation)
                continue
            log.info("%s: agent idle for %g s; stopping it", self.id, idle_s)
            self.stop()
            return

    def status(self) -> dict[str, Any]:
        conversation = self.hub.conversation
        if conversation is not None:
            queue = queue_status(conversation)
        else:
            record = self._store.get_conversation(self.id) or self.record
            queue = stored_queue_status(self._store, self.id, paused=record.paused)
        agent = self.record.agent
        return {
            "conversationId": self.id,
            "agent": agent.get("name") or " ".join(agent.get("argv") or []),
            "agentState": self.agent_state,
            "pid": self.agent_pid,
            **queue,
            "clients": self.hub.clients,
            "lastEvent": self.hub.last_event or None,
        }


def _stopped_by(failure: BaseException | None) -> str | None:
    """What a prompt waiting on a conversation that stopped on ``failure`` is told: what
    happened and what to do next (None: it was closed on purpose, or the host is stopping)."""
    if failure is None:
        return None
    if isinstance(failure, QueueStoreError):
        return (
            f"the conversation stopped: {failure}. Once the store can be written again (free "
            "space, fix its permissions), send or load it again: its queued messages run then, "
            "and the one that was running ends failed and recoverable (chat: /retry N)"
        )
    return f"the conversation stopped: {failure}; send or load it again to start its agent"


async def _busy_again(conversation: Conversation) -> None:
    """Return once a turn runs again (polled through the conversation's commits: a turn's
    start is committed)."""
    while conversation.queue.running is None:
        await conversation.commits.changed.wait()
