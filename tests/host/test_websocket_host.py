"""The host itself served over WebSocket: its own ``serve_listener`` takes a
WebSocketListener as it takes the Unix listener, and its JSON-RPC line code runs unchanged over
the WebSocket stream. Two clients, one on each transport, on one conversation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.host.websocket import WebSocketListener, connect_websocket
from acp_bridge.rpc.peer import JsonRpcPeer
from tests.host import harness
from tests.host.harness import agent_argv, connect, running_host

pytestmark = pytest.mark.anyio

TOKEN = "host-t0ken"


@asynccontextmanager
async def websocket_client(port: int) -> AsyncIterator[harness.TestClient]:
    """An ACP client of the host over ws://127.0.0.1:port/acp, initialized."""
    async with await connect_websocket(f"ws://127.0.0.1:{port}/acp", token=TOKEN) as stream:
        client = harness.TestClient(JsonRpcPeer(stream, stream, name="ws-client"))

        async def on_update(params: Any) -> None:
            client.updates.append(params)
            client.changed.notify_all()

        client.peer.on_notification("session/update", on_update)
        async with anyio.create_task_group() as tg:
            await tg.start(client.peer.run)
            await client.request(
                "initialize",
                {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "ws"}},
            )
            try:
                yield client
            finally:
                await client.peer.aclose()
                tg.cancel_scope.cancel()


async def test_a_websocket_client_and_a_unix_socket_client_share_one_conversation(
    tmp_path: Path,
) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        listener = await WebSocketListener.open("127.0.0.1:0", token=TOKEN)
        host.task_group.start_soon(host.serve_listener, listener)
        assert host.socket_path is not None
        async with (
            websocket_client(listener.port) as remote,
            connect(host.socket_path, name="local") as local,
        ):
            new = await remote.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = new["sessionId"]
            await local.request(
                "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            )
            prompt = [{"type": "text", "text": "echo over the wire"}]
            answer = await remote.request("session/prompt", {"sessionId": sid, "prompt": prompt})
            assert answer == {"stopReason": "end_turn"}
            await local.wait_for(lambda c: "".join(c.texts()) == "over the wire")
            assert "".join(remote.texts()) == "over the wire"
            status = await remote.request("_acp_bridge/status", {"conversationId": sid})
            assert status["conversations"][0]["conversationId"] == sid
