"""A host served in the test's own event loop on a real Unix socket, and ACP clients of it
(rpc/'s JsonRpcPeer over anyio's Unix socket stream), for the host's core tests."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store import QueueStore
from acp_bridge.core.condition import Condition
from acp_bridge.host.clients import ClientLimits
from acp_bridge.host.conversations import HostSettings
from acp_bridge.host.serve import Host, HostOptions, open_unix_listener
from acp_bridge.process.spec import AgentSpec
from acp_bridge.rpc.peer import JsonRpcPeer

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"


def agent_argv(script: str, *flags: str) -> list[str]:
    return [sys.executable, "-u", str(AGENTS / script), "--quiet", *flags]


def settings(
    argv: list[str], *, permission: PermissionMode = PermissionMode.DENY, idle: float | None = None
) -> HostSettings:
    def spec_for(record: ConversationRecord) -> AgentSpec:
        return AgentSpec(list(record.agent.get("argv") or argv), cwd=Path(record.cwd))

    def options_for(policy: PermissionPolicy) -> ClientOptions:
        return ClientOptions(permission=policy)

    return HostSettings(spec_for, options_for, permission=permission, agent_idle_s=idle)


@asynccontextmanager
async def running_host(
    tmp_path: Path, argv: list[str], *, limits: ClientLimits | None = None, **kw: Any
) -> AsyncIterator[Host]:
    store_path = tmp_path / "q.db"
    store = QueueStore.open(store_path)
    socket_path = tmp_path / "s" / "host.sock"
    host = Host(
        store,
        store_path,
        settings(argv, **kw),
        socket_path=socket_path,
        options=HostOptions(limits=limits or ClientLimits()),
        new_agent=lambda name: {"argv": argv},
    )
    try:
        listener = await open_unix_listener(socket_path)
        async with anyio.create_task_group() as tg:
            await tg.start(host.run, listener)
            try:
                yield host
            finally:
                # The clients closed: let the host read their ends first (a reader cancelled
                # as its socket turns readable upsets anyio's asyncio socket stream).
                with anyio.move_on_after(10):
                    while host.client_count:
                        await host.changed.wait()
                tg.cancel_scope.cancel()
    finally:
        store.close()


@dataclass
class TestClient:
    """An ACP client of the host: every notification it got, in order."""

    peer: JsonRpcPeer
    updates: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    other: list[tuple[str, Any]] = field(default_factory=list)
    changed: Condition = field(default_factory=Condition)

    async def request(self, method: str, params: Any = None) -> Any:
        with anyio.fail_after(30):
            return await self.peer.request(method, params)

    async def wait_for(self, predicate: Callable[[TestClient], bool]) -> None:
        with anyio.fail_after(30):
            while not predicate(self):
                await self.changed.wait()

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [
            str(u["update"]["content"].get("text", ""))
            for u in self.updates
            if u["update"].get("sessionUpdate") == kind
        ]


@asynccontextmanager
async def connect(
    socket_path: Path,
    *,
    name: str = "test",
    initialize: bool = True,
    on_permission: Callable[[Any], Any] | None = None,
) -> AsyncIterator[TestClient]:
    stream = await anyio.connect_unix(socket_path)
    async with stream:
        peer = JsonRpcPeer(stream, stream, name=name)
        client = TestClient(peer)

        async def on_update(params: Any) -> None:
            client.updates.append(params)
            client.changed.notify_all()

        async def on_event(params: Any) -> None:
            client.events.append(params)
            client.changed.notify_all()

        async def on_disconnected(params: Any) -> None:
            client.other.append(("_acp_bridge/disconnected", params))
            client.changed.notify_all()

        peer.on_notification("session/update", on_update)
        peer.on_notification("_acp_bridge/event", on_event)
        peer.on_notification("_acp_bridge/disconnected", on_disconnected)
        if on_permission is not None:
            peer.on_request("session/request_permission", on_permission)
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            if initialize:
                await client.request(
                    "initialize",
                    {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": name}},
                )
            try:
                yield client
            finally:
                await peer.aclose()
                tg.cancel_scope.cancel()
