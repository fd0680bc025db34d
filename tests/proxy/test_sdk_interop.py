"""The proxy between clients and agents built on the official SDKs: Python
(``agent-client-protocol``, asyncio) and TypeScript (``@agentclientprotocol/sdk`` 1.5.1 run with
Node; skipped with the reason where Node or npm is missing)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
)

from tests.node_sdk import ensure_node_sdk
from tests.proxy.harness import ENV, ROOT, agent, proxy

NODE_DIR = ROOT / "tests" / "interop" / "node"
TS_AGENT = ["node", str(NODE_DIR / "agent.mjs")]


@pytest.fixture(scope="session")
def node_sdk() -> Path:
    """tests/interop/node with its locked packages installed (npm ci, once per session)."""
    return ensure_node_sdk()


def _ts_client(prompts: list[str], agent_argv: list[str]) -> dict[str, Any]:
    argv = ["node", str(NODE_DIR / "client.mjs"), json.dumps(prompts), "--"]
    result = subprocess.run(
        argv + proxy(agent_argv=agent_argv),
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    assert "error" not in summary, summary
    assert summary["agentExit"] == 0  # the proxy exited 0 on the client's EOF
    return summary


def test_ts_client_through_the_proxy_to_a_ts_agent(node_sdk: Path) -> None:
    summary = _ts_client(["hello world", "permission please"], TS_AGENT)
    assert summary["turns"] == ["end_turn", "end_turn"]
    assert summary["chunks"] == ["hello ", "world ", "permission yes", "permission ", "please "]
    assert summary["permissions"] == 1
    assert summary["ext"]["echo"] == {"a": 1}  # an extension request, both SDKs, through us
    assert summary["agentMeta"] == {"ts.example": {"ok": True}}


def test_ts_client_through_the_proxy_to_python_agents(node_sdk: Path) -> None:
    sdk = _ts_client(
        ["hello world"], [sys.executable, str(ROOT / "fixtures/agents/sdk_echo_agent.py")]
    )
    assert sdk["chunks"] == ["hello ", "world "] and sdk["turns"] == ["end_turn"]
    ext = _ts_client(["go"], agent("ext_agent.py"))
    assert ext["askedExt"] == ["_ext.example/ask"]  # the agent's extension request reached it
    assert json.loads(ext["chunks"][1])["result"]["got"]["_meta"] == {"z": 0}


def test_ts_client_keeps_its_session_across_a_crash(node_sdk: Path, tmp_path: Path) -> None:
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    flags += ["--crash-once-file", str(tmp_path / "crashed")]
    summary = _ts_client(["before", "crash 9", "after"], agent("echo_agent.py", *flags))
    assert summary["turns"][0] == "end_turn" and summary["turns"][2] == "end_turn"
    cut = summary["turns"][1]
    assert cut["data"]["recoverable"] is True and cut["data"]["agentExit"]["returncode"] == 9
    assert summary["chunks"] == ["before", "after"]  # the load's replay never reached it


class _Editor:
    """A Python SDK client that allows once, serves reads and keeps what it was sent."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.permissions = 0
        self.reads: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permissions += 1
        allow = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id)
        )

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        return ReadTextFileResponse(content="from-the-python-client")

    def texts(self) -> list[str]:
        return [u.content.text for u in self.updates if u.session_update == "agent_message_chunk"]


@asynccontextmanager
async def _python_client(agent_argv: list[str]) -> AsyncIterator[tuple[Any, _Editor, str]]:
    editor = _Editor()
    argv = proxy(agent_argv=agent_argv)
    env = {**ENV, "ACP_BRIDGE_PROXY_BACKEND": "asyncio"}
    async with spawn_agent_process(editor, argv[0], *argv[1:], env=env, cwd=ROOT) as (conn, proc):  # type: ignore[arg-type]
        capabilities = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True))
        await conn.initialize(protocol_version=1, client_capabilities=capabilities)
        session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
        yield conn, editor, session.session_id
    assert proc.returncode == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_python_client_through_the_proxy_to_a_ts_agent(node_sdk: Path) -> None:
    async with _python_client(TS_AGENT) as (conn, editor, session_id):
        answer = await conn.prompt(session_id=session_id, prompt=[text_block("permission ok")])
        assert answer.stop_reason == "end_turn"
        assert editor.permissions == 1 and editor.texts() == [
            "permission yes",
            "permission ",
            "ok ",
        ]
        assert (await conn.ext_method("_ext.example/hello", {"b": 2}))["echo"] == {"b": 2}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_python_client_gets_fs_and_permission_requests() -> None:
    async with _python_client(agent("fs_agent.py", "--quiet")) as (conn, editor, session_id):
        for text in ("read /etc/hostname", "permission"):
            answer = await conn.prompt(session_id=session_id, prompt=[text_block(text)])
            assert answer.stop_reason == "end_turn"
        assert editor.reads == ["/etc/hostname"] and editor.permissions == 1
        assert editor.texts()[0] == "read-ok from-the-python-client"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_python_client_keeps_its_session_across_a_crash(tmp_path: Path) -> None:
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    flags += ["--crash-once-file", str(tmp_path / "crashed")]
    async with _python_client(agent("echo_agent.py", *flags)) as (conn, editor, session_id):
        await conn.prompt(session_id=session_id, prompt=[text_block("before")])
        editor.updates.clear()
        with pytest.raises(RequestError) as cut:
            await conn.prompt(session_id=session_id, prompt=[text_block("crash 9")])
        assert cut.value.data["recoverable"] is True
        assert cut.value.data["agentExit"]["returncode"] == 9
        answer = await conn.prompt(session_id=session_id, prompt=[text_block("after")])
        assert answer.stop_reason == "end_turn"
        assert editor.texts() == ["after"]
        assert not [u for u in editor.updates if u.session_update == "user_message_chunk"]
