"""Cancel grace: a stubborn agent's turn is answered ``cancelled`` by the proxy at the grace
window, the agent is replaced and the session restored before the next prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.proxy.harness import agent, chunk_text, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio

GRACE_S = 0.3


async def test_a_stubborn_cancel_is_answered_at_the_grace_window(tmp_path: Path) -> None:
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    argv = proxy(
        "--grace", str(GRACE_S), agent_argv=agent("echo_agent.py", "--on-cancel", "ignore", *flags)
    )
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        # Chunks keep coming through the cancel and after it: the agent ignores it.
        stubborn = await editor.request(
            "session/prompt", prompt_params(session_id, "trickle 100000 2; hang")
        )
        await editor.until(lambda m: chunk_text(m) is not None)
        cancelled_at = anyio.current_time()
        await editor.notify("session/cancel", {"sessionId": session_id})
        behind = await editor.request("session/prompt", prompt_params(session_id, "echo late"))
        answer = await editor.response(stubborn)
        elapsed = anyio.current_time() - cancelled_at
        assert answer["result"] == {"stopReason": "cancelled"}
        assert GRACE_S - 0.01 <= elapsed < GRACE_S + 1.0
        after: list[dict[str, Any]] = []
        assert (await editor.response(behind, after))["result"] == {"stopReason": "cancelled"}
        fine = await editor.request("session/prompt", prompt_params(session_id, "echo fine"))
        assert (await editor.response(fine, after))["result"] == {"stopReason": "end_turn"}
        # Nothing of the cancelled turn reached the editor after its answer.
        assert [chunk_text(m) for m in after if m.get("method") == "session/update"] == ["fine"]
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_cooperative_cancel_is_the_agents_own_answer() -> None:
    argv = proxy("--grace", "5", agent_argv=agent("slow_agent.py", "--quiet"))
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        running = await editor.request("session/prompt", prompt_params(session_id, "echo a; wait"))
        queued = await editor.request("session/prompt", prompt_params(session_id, "echo b"))
        await editor.until(lambda m: chunk_text(m) is not None)
        await editor.notify("session/cancel", {"sessionId": session_id})
        # The queued prompt is answered cancelled at once, the running one by the agent.
        assert (await editor.response(queued))["result"] == {"stopReason": "cancelled"}
        assert (await editor.response(running))["result"] == {"stopReason": "cancelled"}
        again = await editor.call("session/prompt", prompt_params(session_id, "echo c; wait 0"))
        assert again["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0


async def test_repeated_stubborn_cancels_never_use_up_the_agent(tmp_path: Path) -> None:
    """Each grace-window quarantine was counted as a crash: the few cancels a user makes of a
    long tool run ended the agent for good (exit 3). They are restarts the bridge ordered and
    don't count against --max-restarts (here 1)."""
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    argv = proxy(
        "--grace", str(GRACE_S), "--max-restarts", "1",
        agent_argv=agent("echo_agent.py", "--on-cancel", "ignore", *flags),
    )  # fmt: skip
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        for _round in range(4):
            stubborn = await editor.request(
                "session/prompt", prompt_params(session_id, "echo busy; hang")
            )
            await editor.until(lambda m: chunk_text(m) is not None)
            await editor.notify("session/cancel", {"sessionId": session_id})
            answer = await editor.response(stubborn)
            assert answer["result"] == {"stopReason": "cancelled"}
        fine = await editor.call("session/prompt", prompt_params(session_id, "echo still here"))
        assert fine["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0
