"""The proxy passes the agent's elicitations and the newer updates through unchanged: the
editor advertises elicitation, answers ``elicitation/create`` and gets ``elicitation/complete``
and the ``notice``/``compaction_*`` updates as the agent sent them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.proxy.harness import agent, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio


async def test_elicitations_and_new_updates_pass_through_the_proxy() -> None:
    async with open_editor(proxy(agent_argv=agent("echo_agent.py"))) as editor:
        init = await editor.call(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
                "clientInfo": {"name": "t", "version": "1"},
            },
        )
        assert "result" in init, init
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        session_id = new["result"]["sessionId"]
        prompt = await editor.request(
            "session/prompt", prompt_params(session_id, "notice; compaction; elicit url")
        )
        seen: list[dict[str, Any]] = []
        ask = await editor.until(lambda m: m.get("method") == "elicitation/create", seen=seen)
        assert ask["params"] == {
            "sessionId": session_id,
            "mode": "url",
            "message": "Please connect your account",
            "elicitationId": "fake-url-1",
            "url": "https://example.com/connect?elicitationId=fake-url-1",
        }
        await editor.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept"}})
        done = await editor.until(lambda m: m.get("method") == "elicitation/complete", seen=seen)
        assert done["params"] == {"elicitationId": "fake-url-1"}
        answer = await editor.response(prompt, seen)
        assert answer["result"] == {"stopReason": "end_turn"}
        updates = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
        assert [u["sessionUpdate"] for u in updates] == [
            "notice",
            "compaction_update",
            "compaction_summary_chunk",
            "compaction_summary_chunk",
            "compaction_update",
            "agent_message_chunk",
        ]
        assert updates[0] == {
            "sessionUpdate": "notice",
            "severity": "warning",
            "title": "Rate limited",
            "description": "Retrying in 20 s",
        }
        assert updates[-1]["content"]["text"] == "elicit url accept null"
        assert await editor.close_and_wait() == 0
