"""The proxy between a misbehaving editor and agents that die with work pending (issue 20):
ids that never cross, a reused editor id, malformed editor frames, and an ``initialize`` cut by
a crash. Each case runs through the real ``acp-bridge proxy`` process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import agent, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio


async def test_a_late_answer_to_a_dead_agents_request_never_reaches_a_new_one(
    tmp_path: Path,
) -> None:
    """1,100 permission requests, unanswered, then the agent dies. Its restart numbers its
    requests from 1 again. The editor's late "allow" for the dead agent's request 1 must not
    answer the new process's fs/read_text_file 1 (it used to, once the orphan table had
    forgotten the oldest of them)."""
    flags = ["--marker", str(tmp_path / "m"), "--requests", "1100"]
    argv = proxy(agent_argv=agent("reused_ids_agent.py", *flags))
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        first = await editor.request("session/prompt", prompt_params(session_id, "ask"))
        asked: list[dict[str, Any]] = []
        cut = await editor.response(first, asked)
        assert cut["error"]["data"]["recoverable"] is True
        permissions = [m for m in asked if m.get("method") == "session/request_permission"]
        assert len(permissions) == 1100
        ids = [m["id"] for m in permissions]
        assert len(set(ids)) == 1100 and all(str(i).startswith("acp-bridge/agent-") for i in ids)
        withdrawn = [m for m in asked if m.get("method") == "$/cancel_request"]
        cancelled = {m["params"]["requestId"] for m in withdrawn}
        assert cancelled == set(ids)  # the editor was told each was withdrawn
        second = await editor.request("session/prompt", prompt_params(session_id, "read"))
        read = await editor.until(lambda m: m.get("method") == "fs/read_text_file")
        assert read["id"] not in ids  # a new id, whatever the agent numbered it
        # The editor answers late, every dead request first, then the live one.
        for request_id in ids:
            allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
            await editor.send({"jsonrpc": "2.0", "id": request_id, "result": allow})
        await editor.send({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "REAL"}})
        seen: list[dict[str, Any]] = []
        assert (await editor.response(second, seen))["result"] == {"stopReason": "end_turn"}
        texts = [m["params"]["update"]["content"]["text"] for m in seen if m.get("method")]
        assert texts == ['answer-to-1: {"id": 1, "jsonrpc": "2.0", "result": {"content": "REAL"}}']
        assert await editor.close_and_wait() == 0


async def test_an_editor_id_reused_while_in_flight_is_refused_and_the_first_goes_on() -> None:
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", "--quiet"))) as editor:
        first = await editor.handshake()
        second = (await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []}))["result"][
            "sessionId"
        ]
        request = {"jsonrpc": "2.0", "id": 5, "method": "session/prompt"}
        await editor.send({**request, "params": prompt_params(first, "wait")})
        await editor.send({**request, "params": prompt_params(second, "echo B")})
        refused = await editor.response(5)
        assert refused["error"]["code"] == -32600
        assert refused["error"]["data"] == {"duplicateId": 5}
        assert "already in flight" in refused["error"]["message"]
        # The first prompt is untouched: its cancel ends it as cancelled, under id 5.
        await editor.notify("session/cancel", {"sessionId": first})
        answer = await editor.response(5)
        assert answer["result"]["stopReason"] == "cancelled"
        for session_id in (first, second):  # both sessions go on
            again = await editor.call("session/prompt", prompt_params(session_id, "echo ok"))
            assert again["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0
    answers_to_5 = [json.loads(line) for line in editor.lines if b'"id":5,' in line]
    assert len(answers_to_5) == 2  # the refusal and the cancelled turn's answer: nothing else


async def test_the_agents_answers_to_malformed_editor_frames_reach_the_editor() -> None:
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", "--quiet"))) as editor:
        await editor.handshake()
        await editor.send_raw(b'{"jsonrpc":"2.0","id":7,"method":5}')
        bad_method = await editor.response(7)
        assert bad_method["error"]["code"] == -32600
        await editor.send_raw(b"this is not json")
        parse_error = await editor.until(lambda m: "error" in m and m.get("id") is None)
        assert parse_error["error"]["code"] == -32700
        await editor.send_raw(b"[1, 2]")
        batch = await editor.until(lambda m: "error" in m and m.get("id") is None)
        assert batch["error"]["code"] == -32600
        assert await editor.close_and_wait() == 0


async def test_an_initialize_cut_by_a_crash_is_sent_again_and_answered(tmp_path: Path) -> None:
    """Zed does not retry initialize: an error there leaves its agent panel dead although the
    agent is back. initialize has no side effects, so the restarted agent answers it."""
    flags = ["--quiet", "--crash-on", "initialize", "--crash-once-file", str(tmp_path / "c")]
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", *flags))) as editor:
        init = await editor.call(
            "initialize", {"protocolVersion": 1, "clientInfo": {"name": "zed", "version": "1"}}
        )
        assert init["result"]["protocolVersion"] == 1, init
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        session_id = new["result"]["sessionId"]
        answer = await editor.call("session/prompt", prompt_params(session_id, "echo hi"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0
