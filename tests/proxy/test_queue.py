"""A second prompt for a busy session waits in the proxy's FIFO (or, with --no-queue, goes
straight to the agent, which refuses it)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.proxy.harness import agent, chunk_text, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio


async def test_two_prompts_are_queued_in_order_and_sessions_run_side_by_side() -> None:
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", "--quiet"))) as editor:
        first = await editor.handshake()
        other = (await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []}))["result"][
            "sessionId"
        ]
        a = await editor.request("session/prompt", prompt_params(first, "echo a; sleep 200"))
        b = await editor.request("session/prompt", prompt_params(first, "echo b"))
        c = await editor.request("session/prompt", prompt_params(other, "echo c"))
        seen: list[dict[str, Any]] = []
        answer_b = await editor.response(b, seen)
        assert answer_b["result"] == {"stopReason": "end_turn"}
        order = [
            m.get("id") if "id" in m else chunk_text(m) for m in seen if "id" in m or chunk_text(m)
        ]
        # The other session did not wait for the first one's turn; b waited for a.
        assert order.index(c) < order.index(a)
        assert order.index("a") < order.index(a) < order.index("b")
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_no_queue_passes_the_second_prompt_straight_through() -> None:
    argv = proxy("--no-queue", agent_argv=agent("echo_agent.py", "--quiet"))
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        a = await editor.request("session/prompt", prompt_params(session_id, "echo a; sleep 200"))
        b = await editor.request("session/prompt", prompt_params(session_id, "echo b"))
        refused = await editor.response(b)
        assert refused["error"]["code"] == -32600  # the agent's own "prompt already in progress"
        assert (await editor.response(a))["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0
