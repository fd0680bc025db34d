"""The host's listeners and its task group; the endpoint a ``run`` or ``chat`` owner serves.

:class:`Host` owns the conversations of one store (:class:`~.conversations.HostConversation`)
and serves every connection a listener accepts (:meth:`Host.serve_listener`: the Unix socket;
a second listener, e.g. the WebSocket one, is one more call with a listener that yields byte
streams carrying one JSON-RPC message per line). At start it resumes every conversation the
store left unfinished (queued or running messages: a message cut by a crash of the previous
host ends failed and recoverable, as ``run`` does) and whose owner lock is free.

:func:`serve_conversation_endpoint` serves the same methods for the one conversation a
``run`` or ``chat`` owns, on a socket of its own (``<socket dir>/c-<id>.sock``), so a verb
reaches a conversation whoever owns it.

Bounds: at most ``max_clients`` connections (default 256; one more is closed at once); each
connection's bounds are :class:`~.clients.ClientLimits`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
from anyio.abc import ByteStream, Listener, SocketListener, TaskGroup

from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.store_api import Store
from acp_bridge.core.condition import Condition
from acp_bridge.errors import BridgeError, QueueStoreError, RpcError, UnsafeFileError
from acp_bridge.host.acp_server import (
    ConversationEntry,
    cancel_answer,
    pause_in_store,
    serve_methods,
    stop_answer,
)
from acp_bridge.host.clients import Client, ClientLimits, Pacer
from acp_bridge.host.conversations import ConversationHub, HostConversation, HostSettings
from acp_bridge.host.endpoint import bind_socket, prepare_socket_dir
from acp_bridge.host.owner import ConversationBusyError
from acp_bridge.host.status_rows import queue_status
from acp_bridge.rpc.peer import JsonRpcPeer

__all__ = [
    "DEFAULT_MAX_CLIENTS",
    "ORPHAN_SWEEP_S",
    "Host",
    "HostOptions",
    "open_unix_listener",
    "serve_conversation_endpoint",
]

log = logging.getLogger(__name__)

_UNFINISHED = (MessageState.QUEUED, MessageState.RUNNING, MessageState.STEERING)

DEFAULT_MAX_CLIENTS: Final = 256
ORPHAN_SWEEP_S: Final = 5.0
"""How often a host on a shared store looks for unfinished conversations no live host holds."""
_NOT_FOUND: Final = -32002


@dataclass(frozen=True)
class HostOptions:
    limits: ClientLimits = field(default_factory=ClientLimits)
    max_clients: int = DEFAULT_MAX_CLIENTS
    max_in_flight: int = 128
    """Requests served at once per connection (as the proxy's ``--max-in-flight``)."""


async def open_unix_listener(socket_path: Path) -> SocketListener:
    """Listen on ``socket_path`` (its directory made private and checked first).

    Raises:
        HostEndpointError: the directory or the socket path cannot be used (one line).
        HostRunningError: a host already answers there.
    """
    prepare_socket_dir(socket_path.parent)
    return await SocketListener.from_socket(bind_socket(socket_path))


class _Connections:
    """The connections of one endpoint, numbered, bounded, each served on its own peer."""

    def __init__(self, options: HostOptions) -> None:
        self.options = options
        self.clients: dict[int, Client] = {}
        self.pacer = Pacer()
        """Paces the writes to all these clients (run by the endpoint's owner)."""
        self.changed = Condition()
        self._numbers = itertools.count(1)

    async def serve(
        self, stream: ByteStream, conversations: Any, hubs: Callable[[], Iterator[ConversationHub]]
    ) -> None:
        async with stream:
            if len(self.clients) >= self.options.max_clients:
                log.warning("refusing a connection: %d clients already", len(self.clients))
                return
            number = next(self._numbers)
            peer = JsonRpcPeer(
                stream,
                stream,
                name=f"client {number}",
                max_requests_in_flight=self.options.max_in_flight,
            )
            client = Client(number, peer, self.options.limits, pacer=self.pacer)

            def detach() -> None:
                for hub in hubs():
                    hub.detach(client)

            client.on_cut = detach  # cut off: asked nothing more, fed nothing more
            serve_methods(peer, client, conversations)
            self.clients[number] = client
            self.changed.notify_all()
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client.run_output)
                    await peer.run()
                    client.outbox.close()
            finally:
                detach()
                del self.clients[number]
                self.changed.notify_all()


class _Entry:
    """A host conversation as a connection reaches it."""

    def __init__(self, host: Host, conversation: HostConversation) -> None:
        self._host = host
        self.conversation = conversation

    @property
    def hub(self) -> ConversationHub:
        return self.conversation.hub

    async def open(self) -> Conversation:
        return await self.conversation.ensure_open(self._host.task_group)

    def status(self) -> dict[str, Any]:
        return self.conversation.status()

    async def close(self) -> None:
        await self._host.close_conversation(self.conversation.id)

    async def stop(self) -> dict[str, Any]:
        entry = self.conversation
        if entry.conversation is None and entry.starting:
            await self.open()  # its record is read already: stop it once it runs
        conversation = entry.conversation
        if conversation is not None:
            return await stop_answer(conversation)
        store = self._host.store
        return await anyio.to_thread.run_sync(pause_in_store, store, entry.id, time.time())


class Host:
    """The conversation host of one store (see the module's text)."""

    def __init__(
        self,
        store: Store,
        store_path: Path,
        settings: HostSettings,
        *,
        socket_path: Path | None = None,
        options: HostOptions | None = None,
        new_agent: Callable[[str | None], dict[str, Any]] | None = None,
    ) -> None:
        self.store = store
        self.store_path = store_path
        self.socket_path = socket_path
        self.settings = settings
        self.options = options or HostOptions()
        self._new_agent = new_agent
        self._open: dict[str, HostConversation] = {}
        self._connections = _Connections(self.options)
        self._task_group: TaskGroup | None = None
        self._stopping = False
        self.changed = self._connections.changed
        self.on_taken: Callable[[str], None] | None = None
        """Told each conversation this host takes (claims), on the event loop's thread: a
        shared store's pending cancel and stop requests are then acted on (issue 23)."""

    @property
    def task_group(self) -> TaskGroup:
        assert self._task_group is not None, "Host.run() is not running"
        return self._task_group

    @property
    def client_count(self) -> int:
        """Connections open now (:attr:`changed` is notified when it changes)."""
        return len(self._connections.clients)

    # -- running -------------------------------------------------------------------------

    async def run(
        self,
        listener: Listener[Any],
        *,
        exit_when_idle_s: float | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve ``listener`` (and any added with :meth:`serve_listener`) until cancelled, or
        until idle for ``exit_when_idle_s`` (no client, no turn running or queued)."""
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                tg.start_soon(self._connections.pacer.run)
                tg.start_soon(self.serve_listener, listener)
                await self.resume_unfinished()
                if self.store.is_shared:
                    tg.start_soon(self._sweep_orphans)
                task_status.started()
                if exit_when_idle_s is not None:
                    await self._until_idle(exit_when_idle_s)
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._close_all()

    async def serve_listener(self, listener: Listener[Any]) -> None:
        """Serve every connection ``listener`` accepts (a byte stream, one message a line)."""
        async with listener:
            await listener.serve(self._serve_connection, self.task_group)

    async def _serve_connection(self, stream: ByteStream) -> None:
        await self._connections.serve(stream, self, self._hubs)

    def _hubs(self) -> Iterator[ConversationHub]:
        return iter([c.hub for c in self._open.values()])

    async def resume_unfinished(self) -> None:
        """Start opening every conversation of the store with messages left queued, running or
        steering (their agents start at once, side by side; clients are served meanwhile). A
        steer with no answer ends "steer unconfirmed" as the conversation opens: never resent."""
        await self._take_unfinished(sweeping=False)

    async def _take_unfinished(self, *, sweeping: bool) -> None:
        summaries = await anyio.to_thread.run_sync(self.store.conversation_summaries)
        for summary in summaries:
            counts = summary.states
            if sweeping and summary.record.id in self._open:
                continue
            if any(counts.get(state, 0) for state in _UNFINISHED):
                try:
                    entry = self._take(summary.record.id)
                except RpcError as exc:
                    # Sweeping, a conversation its live owner holds is the usual case.
                    (log.debug if sweeping else log.warning)(
                        "not resuming %s: %s", summary.record.id, exc
                    )
                    continue
                self.task_group.start_soon(self._resume, entry)

    async def _sweep_orphans(self) -> None:
        """On a shared store, every :data:`ORPHAN_SWEEP_S`: take every conversation with
        unfinished messages that no live host holds (issue 23). A message sent while its owner
        still looked alive (its lease held, its heartbeat fresh: a partitioned or stopped
        host) was committed for that owner; once the owner is stale, or its lease gone, no
        notification comes again, and without this sweep the message would wait for the next
        send or host start."""
        while True:
            await anyio.sleep(ORPHAN_SWEEP_S)
            try:
                await self._take_unfinished(sweeping=True)
            except BridgeError as exc:  # the store is unreachable for now: the next sweep
                log.debug("the sweep for unowned conversations failed: %s", exc)

    async def sent_elsewhere(self, conversation_id: str) -> None:
        """Another host committed a message to the conversation (a shared store notified us,
        issue 23): the open conversation queues it; one this host has not opened is taken,
        as :meth:`resume_unfinished` would, unless another live host owns it (then that
        host's own notification wakes it)."""
        entry = self._open.get(conversation_id)
        if entry is None:
            try:
                entry = self._take(conversation_id)
            except RpcError:
                return  # owned elsewhere, or gone
        conversation = entry.conversation
        if conversation is not None:
            await conversation.take_sent_elsewhere()
        elif not entry.starting:
            self.task_group.start_soon(self._resume, entry)

    async def control(
        self, conversation_id: str, kind: str, seq: int | None
    ) -> dict[str, Any] | None:
        """A ``cancel`` or ``stop`` asked through the shared store (issue 23: a verb on a host
        that cannot reach this one): done if this host holds the conversation, and the answer
        returned (as ``_acp_bridge/cancel`` and ``_acp_bridge/stop`` answer); None when it
        does not (the request is left for its owner). A cancel cancels only message ``seq``."""
        entry = self._open.get(conversation_id)
        if entry is None:
            return None
        if kind == "stop":
            return await _Entry(self, entry).stop()
        conversation = entry.conversation
        if conversation is None:
            return {"cancelled": False}
        return await cancel_answer(conversation, seq)

    async def missed_notifications(self) -> None:
        """The shared store's notifications may have been missed (the listener's connection
        was lost and opened again): every open conversation reads its queue again, and every
        conversation with unfinished messages nobody owns is taken, as at start-up."""
        for conversation_id in list(self._open):
            await self.sent_elsewhere(conversation_id)
        await self.resume_unfinished()

    def lease_lost(self, conversation_id: str) -> None:
        """Its lease in the shared store was lost (issue 23: this host was taken over, or
        its lease session ended): the conversation's turn is cut at once, its agent stopped,
        and it is forgotten here (its clients detached), so that the next use takes it again
        if its new owner has gone too. On the event loop's thread
        (:meth:`PgStore.report_lost_here`)."""
        entry = self._open.get(conversation_id)
        if entry is None:
            return
        log.warning("%s: its lease was lost (another host owns it now); stopping it", entry.id)
        entry.lease_lost()
        if self._task_group is not None:
            self._task_group.start_soon(self._forget_lost, entry)

    async def _forget_lost(self, entry: HostConversation) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            await entry.wait_stopped()
        if self._open.get(entry.id) is entry:
            del self._open[entry.id]
            for client in list(entry.hub.attached.values()) + list(entry.hub.watchers.values()):
                entry.hub.detach(client)
            entry.release()

    async def _resume(self, entry: HostConversation) -> None:
        try:
            await entry.ensure_open(self.task_group)
        except (RpcError, BridgeError) as exc:
            log.warning("not resuming %s: %s", entry.id, exc)

    async def _until_idle(self, idle_s: float) -> None:
        while True:
            while not self._is_idle():
                await _either(self.changed, self._conversations_changed())
            with anyio.move_on_after(idle_s):
                while self._is_idle():
                    await _either(self.changed, self._conversations_changed())
                continue
            log.info("idle for %g s; exiting", idle_s)
            return

    def _conversations_changed(self) -> list[Condition]:
        conditions: list[Condition] = []
        for entry in self._open.values():
            conditions.append(entry.hub.changed)
            conversation = entry.conversation
            if conversation is not None:
                conditions.append(conversation.commits.changed)
        return conditions

    def _is_idle(self) -> bool:
        if self._connections.clients:
            return False
        for entry in self._open.values():
            conversation = entry.conversation
            if conversation is None:
                if entry.starting:
                    return False
                continue
            if conversation.queue.running is not None:
                return False
            if any(not m.state.is_final for m in conversation.messages()):
                return False
        return True

    async def shutdown(self) -> None:
        """Stop in order, before the host's tasks are cancelled (``serve`` on a signal): no
        conversation opens any more, and every open one stops as :meth:`close_conversation`
        stops it: its running turn is cancelled with the grace window while its agent can
        still be told, recorded, and its agent stopped. (Cancelling the host's tasks first
        would stop each agent's connection with the turn: the cancel could not be sent, and
        the grace window was waited out for nothing.) Returns once every one stopped."""
        self._stopping = True
        entries = list(self._open.values())
        for entry in entries:
            entry.shut()
        for entry in entries:
            await entry.wait_stopped()

    def stop_now(self) -> None:
        """During :meth:`shutdown` (a second signal): stop waiting for the running turns;
        every agent's tree is killed and its turn recorded cancelled at once."""
        self._stopping = True
        for entry in list(self._open.values()):
            entry.stop_now()

    async def _close_all(self) -> None:
        for entry in list(self._open.values()):
            entry.stop()
        with anyio.move_on_after(30):
            for entry in list(self._open.values()):
                while entry.conversation is not None:
                    await entry.hub.changed.wait()
        for entry in list(self._open.values()):
            entry.release()
        self._open.clear()

    async def close_conversation(self, conversation_id: str) -> None:
        entry = self._open.pop(conversation_id, None)
        if entry is None:
            return
        conversation = entry.conversation
        if conversation is not None:  # on purpose: it logs conversation_closed
            await conversation.close()
        entry.stop()
        with anyio.move_on_after(60):
            while entry.conversation is not None:
                await entry.hub.changed.wait()
        for client in list(entry.hub.attached.values()) + list(entry.hub.watchers.values()):
            entry.hub.detach(client)
        entry.release()

    # -- Conversations (acp_server) --------------------------------------------------------

    def find(self, conversation_id: str) -> ConversationEntry:
        return _Entry(self, self._take(conversation_id))

    def _take(self, conversation_id: str) -> HostConversation:
        entry = self._open.get(conversation_id)
        if entry is not None:
            return entry
        if self._stopping:
            raise RpcError(
                -32603, f"conversation {conversation_id} is not open: the host is stopping"
            )
        record = self.store.get_conversation(conversation_id)
        if record is None:
            raise RpcError(_NOT_FOUND, f"no conversation {conversation_id} in {self.store_path}")
        entry = HostConversation(self.store, self.store_path, record, self.settings)
        try:
            entry.claim()
        except ConversationBusyError as exc:
            # On a shared store: another live host owns it (a verb may commit for it instead).
            data = {"acpBridge": {"ownedElsewhere": True}} if self.store.is_shared else None
            raise RpcError(-32603, str(exc), data) from None
        except (UnsafeFileError, OSError) as exc:
            raise RpcError(-32603, str(exc)) from None
        self._open[conversation_id] = entry
        if self.on_taken is not None:
            self.on_taken(conversation_id)
        return entry

    async def create(self, params: dict[str, Any]) -> ConversationEntry:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not Path(cwd).is_absolute():
            raise RpcError(-32602, "session/new needs an absolute cwd")
        meta = params.get("_meta")
        bridge = meta.get("acpBridge") if isinstance(meta, dict) else None
        name = bridge.get("agent") if isinstance(bridge, dict) else None
        if self._new_agent is None:
            raise RpcError(-32603, "this endpoint serves one conversation; session/new is refused")
        try:
            agent = self._new_agent(name if isinstance(name, str) else None)
        except ValueError as exc:
            raise RpcError(-32602, str(exc)) from None
        servers = params.get("mcpServers")
        try:
            record = await anyio.to_thread.run_sync(
                lambda: self.store.create_conversation(
                    agent=agent,
                    cwd=cwd,
                    mcp_servers=list(servers) if isinstance(servers, list) else [],
                    now=time.time(),
                )
            )
        except QueueStoreError as exc:
            raise RpcError(-32603, str(exc)) from None
        return self.find(record.id)

    def listing(self) -> list[dict[str, Any]]:
        return [
            {
                "sessionId": record.id,
                "cwd": record.cwd,
                **({"title": record.title} if record.title else {}),
                "updatedAt": _iso(record.updated_at),
            }
            for record in self.store.list_conversations()
        ]

    def entries(self) -> list[ConversationEntry]:
        return [_Entry(self, entry) for entry in self._open.values()]


async def _either(first: Condition, others: list[Condition]) -> None:
    """Wait for a notify of ``first`` or of any of ``others``."""
    async with anyio.create_task_group() as tg:

        async def wait(condition: Condition) -> None:
            await condition.wait()
            tg.cancel_scope.cancel()

        for condition in [first, *others]:
            tg.start_soon(wait, condition)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# -- the endpoint of a run or chat owner ------------------------------------------------------


class _OwnedEntry:
    def __init__(self, hub: ConversationHub, conversation: Conversation) -> None:
        self.hub = hub
        self._conversation = conversation

    async def open(self) -> Conversation:
        return self._conversation

    def status(self) -> dict[str, Any]:
        conversation = self._conversation
        agent = conversation.agent
        return {
            "conversationId": conversation.id,
            "agent": agent.name,
            "agentState": "running" if agent.is_ready else "starting",
            "pid": agent.pid,
            **queue_status(conversation),
            "clients": self.hub.clients,
            "lastEvent": self.hub.last_event or None,
        }

    async def close(self) -> None:
        raise RpcError(-32603, "this conversation is owned by a run or chat: end it there")

    async def stop(self) -> dict[str, Any]:
        return await stop_answer(self._conversation)


class _OneConversation:
    """The endpoint of a run/chat owner: its one conversation."""

    def __init__(
        self, store_path: Path, socket_path: Path, entry: _OwnedEntry, options: HostOptions
    ) -> None:
        self.store_path = store_path
        self.socket_path: Path | None = socket_path
        self._entry = entry
        self.connections = _Connections(options)

    def find(self, conversation_id: str) -> ConversationEntry:
        if conversation_id != self._entry.hub.id:
            raise RpcError(_NOT_FOUND, f"this endpoint serves conversation {self._entry.hub.id}")
        return self._entry

    async def create(self, params: dict[str, Any]) -> ConversationEntry:
        raise RpcError(-32603, "this endpoint serves one conversation; session/new is refused")

    def listing(self) -> list[dict[str, Any]]:
        return [{"sessionId": self._entry.hub.id, "cwd": str(self._entry.hub.id)}]

    def entries(self) -> list[ConversationEntry]:
        return [self._entry]


@contextlib.asynccontextmanager
async def serve_conversation_endpoint(
    conversation: Conversation,
    store: Store,
    store_path: Path,
    socket_path: Path,
    options: HostOptions | None = None,
) -> Any:
    """Serve ``_acp_bridge/*`` (and attaching ACP clients) for the one ``conversation`` a run
    or chat owns, on ``socket_path``, while the context is open.

    Raises:
        HostEndpointError: the socket's directory or path cannot be used.
    """
    listener = await open_unix_listener(socket_path)
    hub = ConversationHub(store, conversation.id)
    endpoint = _OneConversation(
        store_path, socket_path, _OwnedEntry(hub, conversation), options or HostOptions()
    )

    async def serve(stream: ByteStream) -> None:
        await endpoint.connections.serve(stream, endpoint, lambda: iter([hub]))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(hub.live, conversation)
            tg.start_soon(endpoint.connections.pacer.run)
            tg.start_soon(listener.serve, serve, tg)
            try:
                yield endpoint
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await listener.aclose()
        with contextlib.suppress(OSError):
            os.unlink(socket_path)  # ours: bound by this process
