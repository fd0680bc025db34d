"""The reference agent under real clients: acp-bridge's supervised client and the official
Python SDK's client.

Asyncio only: the SDK is asyncio-only, and each test pays one litellm import per agent process.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.events import PermissionDecided, UpdateReceived
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.errors import AgentExitedError
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from tests.agents.agent_client import ROOT, agent_argv, agent_env, requires_litellm

pytestmark = [
    requires_litellm,
    pytest.mark.anyio,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
    # Each process imports litellm (seconds, several times that on a loaded machine): the
    # suite's 60 s is no safety net for a walk of several agent processes.
    pytest.mark.timeout(180),
]

OPTIONS = ClientOptions(
    allow_fs_read=True,
    allow_fs_write=True,
    allow_terminal=True,
    permission=PermissionPolicy(PermissionMode.ALLOW_ALL),
    restart=RestartPolicy(initial_delay_s=0.01, max_delay_s=0.05, max_restarts=3),
    shutdown=ShutdownTimeouts(stdin_close_grace_s=2, term_grace_s=1, kill_wait_s=5),
    startup_timeout_s=60,  # a safety net: litellm's import takes seconds, more under load
)


def _text(events: list[Any]) -> str:
    return "".join(
        str(e.raw.get("content", {}).get("text", ""))
        for e in events
        if isinstance(e, UpdateReceived) and e.raw.get("sessionUpdate") == "agent_message_chunk"
    )


async def test_under_both_clients_at_once(tmp_path: Path) -> None:
    """Both scenarios run concurrently: each starts its own agent, and the two agents' litellm
    imports (seconds each) overlap instead of adding up."""
    (tmp_path / "bridge").mkdir()
    (tmp_path / "sdk").mkdir()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_through_the_bridge, tmp_path / "bridge")
        tg.start_soon(_under_the_official_sdk_client, tmp_path / "sdk")


async def _through_the_bridge(tmp_path: Path) -> None:
    """Stream, a write with permission, a cancel mid-stream, a model and a mode switch, then a
    crash: the supervisor restarts the agent and restores the same session by ``session/load``
    from the agent's SQLite history (the replay lands in the session's history, not in a
    turn), and the conversation goes on. The demo's e2e test does the same through the
    conversation layer."""
    work = tmp_path / "project"
    work.mkdir()
    spec = AgentSpec(
        agent_argv(tmp_path / "history.db"), name="reference-agent", env={"PYTHONPATH": str(ROOT)}
    )
    async with open_supervised_agent(spec, replace(OPTIONS, base_env=os.environ)) as agent:
        session = await agent.new_session(work)
        model = next(o for o in session.config_options if o.id == "model")
        assert model.category == "model"
        with anyio.fail_after(60):
            async with session.prompt("stream please") as turn:
                events = [event async for event in turn]
        response = await turn.wait()
        assert response.stop_reason == "end_turn" and _text(events) == "one two three four five"
        assert response.usage is not None and response.usage.total_tokens > 0

        async with session.prompt("write the file") as turn:
            events = [event async for event in turn]
        assert (await turn.wait()).stop_reason == "end_turn"
        decided = [e for e in events if isinstance(e, PermissionDecided)]
        assert [d.option_kind for d in decided] == ["allow_once"]
        assert (work / "out.txt").read_text() == "hello\n"

        async with session.prompt("slow one") as turn:
            async for event in turn:
                if _text([event]):
                    break
            cancelled_at = time.perf_counter()
            await session.cancel()
        assert (await turn.wait()).stop_reason == "cancelled"
        assert time.perf_counter() - cancelled_at < 1.0

        await session.set_config_option("model", "gpt-4o")
        await session.set_mode("ask")
        assert session.config_choices.get("model") == "gpt-4o" and session.mode_id == "ask"
        async with session.prompt("write in ask mode") as turn:
            events = [event async for event in turn]
        assert (await turn.wait()).stop_reason == "end_turn"
        assert not [e for e in events if isinstance(e, PermissionDecided)]  # not offered

        first_pid, session_id = agent.pid, session.id
        with pytest.raises(AgentExitedError) as crashed:
            await session.run("crash now")
        assert crashed.value.recoverable
        with anyio.fail_after(60):  # the new process imports litellm again
            response = await session.run("still there?")
        assert response.stop_reason == "end_turn"
        assert session.id == session_id and agent.pid not in (None, first_pid)
        replayed = [u for u in session.history if u.get("sessionUpdate") == "user_message_chunk"]
        assert any("stream please" in str(u.get("content")) for u in replayed)


class _SdkClient:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.updates: list[Any] = []
        self.permission_kinds: list[str] = []
        self.first_chunk = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        if getattr(update, "session_update", "") == "agent_message_chunk":
            self.first_chunk.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> Any:
        from acp.schema import AllowedOutcome, RequestPermissionResponse

        chosen = next(o for o in options if o.kind == "reject_once")
        self.permission_kinds.append(chosen.kind)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> Any:
        from acp import RequestError
        from acp.schema import ReadTextFileResponse

        try:
            return ReadTextFileResponse(content=await anyio.Path(path).read_text())
        except FileNotFoundError:
            raise RequestError.resource_not_found(path) from None

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any) -> Any:
        raise AssertionError("the client rejected every write; none may happen")


async def _under_the_official_sdk_client(tmp_path: Path) -> None:
    from acp import spawn_agent_process, text_block
    from acp.schema import ClientCapabilities, FileSystemCapabilities

    client = _SdkClient(tmp_path)
    argv = agent_argv(tmp_path / "history.db")
    sdk_client: Any = client  # structurally an acp.Client
    async with spawn_agent_process(sdk_client, argv[0], *argv[1:], env=agent_env()) as (conn, _):
        caps = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=True, write_text_file=True)
        )
        init = await conn.initialize(protocol_version=1, client_capabilities=caps)
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        sid = session.session_id
        response = await conn.prompt(session_id=sid, prompt=[text_block("stream please")])
        assert response.stop_reason == "end_turn"
        assert response.usage is not None and response.usage.output_tokens > 0
        kinds = [u.session_update for u in client.updates]
        assert {"agent_thought_chunk", "agent_message_chunk", "usage_update"} <= set(kinds)

        response = await conn.prompt(session_id=sid, prompt=[text_block("write the file")])
        assert response.stop_reason == "end_turn"  # denied: the model is told, and goes on
        assert client.permission_kinds == ["reject_once"] and not (tmp_path / "out.txt").exists()
        failed = [u for u in client.updates if getattr(u, "status", None) == "failed"]
        assert len(failed) == 1

        client.first_chunk.clear()
        slow = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("slow")]))
        await client.first_chunk.wait()
        await conn.cancel(session_id=sid)
        assert (await asyncio.wait_for(slow, 5)).stop_reason == "cancelled"

        await conn.set_session_mode(session_id=sid, mode_id="ask")
        changed = await conn.set_config_option(config_id="model", session_id=sid, value="gpt-4o")
        values = {o.id: o.current_value for o in changed.config_options}
        assert values == {"mode": "ask", "model": "gpt-4o"}
        listed = await conn.list_sessions(cwd=str(tmp_path))
        assert [s.session_id for s in listed.sessions] == [sid]
