"""The TypeScript SDK 2.4.0's own Streamable HTTP client (createHttpStream, on Node's fetch)
against our listener, on both anyio backends: a minimal ACP agent on our JSON-RPC peer, then
the host itself, then the real ``serve --listen`` command (HTTP and WebSocket on one port)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteStream

from acp_bridge.host.websocket import WebSocketListener, serve_websocket
from acp_bridge.rpc.peer import JsonRpcPeer
from tests.host.cli_client import LineClient
from tests.host.harness import agent_argv, running_host
from tests.host.listen_cli import ENV, listening_host
from tests.node_sdk import ensure_node_sdk
from tests.verbs.fake_hosts import short_dir

pytestmark = pytest.mark.timeout(120)

TOKEN = "interop-t0ken"


@pytest.fixture(scope="module")
def node_dir() -> Path:
    directory = ensure_node_sdk()  # skips, with the reason, when node or npm is missing
    if not (directory / "node_modules" / "acp-sdk-2.4").is_dir():
        pytest.skip("the TypeScript SDK 2.4.0 is not installed in tests/interop/node")
    return directory


@pytest.fixture
def directory() -> Iterator[Path]:
    with short_dir() as path:  # a Unix socket path holds at most 107 bytes
        yield path


async def minimal_agent(stream: ByteStream) -> None:
    peer = JsonRpcPeer(stream, stream, name="http-agent")

    async def initialize(params: Any) -> dict[str, Any]:
        return {
            "protocolVersion": 1,
            "agentCapabilities": {},
            "agentInfo": {"name": "acp-bridge-http-test", "version": "0"},
            "authMethods": [],
        }

    async def new_session(params: Any) -> dict[str, Any]:
        return {"sessionId": "http-session-1"}

    async def prompt(params: Any) -> dict[str, Any]:
        for text in ("h", "i"):
            content = {"type": "text", "text": text}
            update = {"sessionUpdate": "agent_message_chunk", "content": content}
            note = {"sessionId": params["sessionId"], "update": update}
            await peer.notify("session/update", note)
        return {"stopReason": "end_turn"}

    peer.on_request("initialize", initialize)
    peer.on_request("session/new", new_session)
    peer.on_request("session/prompt", prompt)
    await peer.run()


async def _run_client(node_dir: Path, url: str, token: str | None) -> dict[str, Any]:
    command = ["node", str(node_dir / "http_client.mjs"), url, *([token] if token else [])]
    result = await anyio.run_process(command, cwd=node_dir, check=False)
    assert result.returncode == 0, result.stderr.decode()
    summary: dict[str, Any] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return summary


@pytest.mark.anyio
async def test_the_typescript_sdk_http_client_talks_acp_to_our_listener(node_dir: Path) -> None:
    serve = partial(serve_websocket, "127.0.0.1:0", minimal_agent, token=TOKEN)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve)
        summary = await _run_client(node_dir, f"http://127.0.0.1:{port}/acp", TOKEN)
        assert summary == {
            "text": "hi",
            "protocolVersion": 1,
            "agentName": "acp-bridge-http-test",
            "sessionId": "http-session-1",
            "stopReason": "end_turn",
        }
        refused = await _run_client(node_dir, f"http://127.0.0.1:{port}/acp", "wrong")
        assert refused["error"].startswith("ACP initialize failed: 401"), refused
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_the_typescript_sdk_http_client_talks_to_the_host(
    node_dir: Path, tmp_path: Path
) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        listener = await WebSocketListener.open("127.0.0.1:0", token=TOKEN)
        host.task_group.start_soon(host.serve_listener, listener)
        summary = await _run_client(node_dir, f"http://127.0.0.1:{listener.port}/acp", TOKEN)
        assert summary["text"] == "hello" and summary["stopReason"] == "end_turn", summary
        conversations = [entry["sessionId"] for entry in host.listing()]
        assert summary["sessionId"] in conversations  # the session is a host conversation


def _client(node_dir: Path, script: str, url: str, token: str | None) -> dict[str, Any]:
    command = ["node", str(node_dir / script), url, *([token] if token else [])]
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=node_dir, env=ENV, timeout=60
    )
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def test_the_typescript_sdk_http_client_against_serve_listen(
    node_dir: Path, directory: Path
) -> None:
    """The real ``serve --listen``: the SDK's HTTP client and its WebSocket client on the one
    port, both on the host's conversations; a wrong or missing token is refused."""
    with listening_host(directory, "--listen", "127.0.0.1:0") as host:
        token = host.token_file.read_text().strip()
        http_url = host.url.replace("ws://", "http://", 1)
        summary = _client(node_dir, "http_client.mjs", http_url, token)
        assert summary == {
            "protocolVersion": 1,
            "agentName": "acp-bridge-host",
            "sessionId": summary.get("sessionId"),
            "text": "hello",
            "stopReason": "end_turn",
        }, summary
        over_ws = _client(node_dir, "ws_client.mjs", host.url, token)
        assert over_ws["text"] == "hello" and over_ws["stopReason"] == "end_turn", over_ws
        listed = LineClient(host.socket)
        try:
            listed.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            sessions = listed.request("session/list")["result"]["sessions"]
        finally:
            listed.close()
        ids = {s["sessionId"] for s in sessions}
        assert {summary["sessionId"], over_ws["sessionId"]} <= ids
        refused = _client(node_dir, "http_client.mjs", http_url, "wrong")
        assert refused["error"].startswith("ACP initialize failed: 401"), refused
        missing = _client(node_dir, "http_client.mjs", http_url, None)
        assert missing["error"].startswith("ACP initialize failed: 401"), missing
