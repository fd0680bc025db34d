"""The proxy passes the agent's steering through unchanged (issue 24): the agent's
``_meta.steering`` advertisement reaches the editor, and two editor steers of one running turn
reach the agent, in order, each answered ``injected``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.proxy.harness import chunk_text, open_editor, prompt_params, proxy
from tests.steer.helpers import STEERING, argv, environment, logged

pytestmark = pytest.mark.anyio


def _steer(session_id: str, text: str) -> dict[str, object]:
    meta = {"steering": {"idleBehavior": "promptRequired"}}
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}], "_meta": meta}


async def test_two_editor_steers_reach_the_agent_in_order(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    wrapped = ["env", *(f"{k}={v}" for k, v in environment(log).items())]
    async with open_editor(proxy(agent_argv=[*wrapped, *argv(STEERING, tmp_path)])) as editor:
        init = await editor.call(
            "initialize", {"protocolVersion": 1, "clientInfo": {"name": "t", "version": "1"}}
        )
        assert init["result"]["_meta"]["steering"] == {"supported": True}
        new = await editor.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session_id = new["result"]["sessionId"]
        seen: list[dict[str, object]] = []
        prompt = await editor.request(
            "session/prompt", prompt_params(session_id, "echo go; steers 2")
        )
        await editor.until(lambda m: chunk_text(m) == "go")  # the turn runs at the agent
        first = await editor.request("_session/steering", _steer(session_id, "one"))
        second = await editor.request("_session/steering", _steer(session_id, "two"))
        # The three answers in whatever order they come: the fixture's steer worker writes a
        # steer's answer after the turn may already have echoed it and ended (seen once under
        # load: the turn's answer before the second steer's).
        answers: dict[object, dict[str, object]] = {}
        while len(answers) < 3:
            got = await editor.until(
                lambda m: "method" not in m and m.get("id") in (first, second, prompt), seen=seen
            )
            answers[got["id"]] = got
        assert answers[first]["result"] == {"outcome": "injected"}
        assert answers[second]["result"] == {"outcome": "injected"}
        assert answers[prompt]["result"] == {"stopReason": "end_turn"}
        texts = [t for m in seen if (t := chunk_text(m))]  # type: ignore[arg-type]
        assert texts == ["[steer] one ", "[steer] two "]
        assert await editor.close_and_wait() == 0
    steers = [line for line in logged(log) if line.startswith("steer ")]
    assert steers == ["steer one", "steer two"]
