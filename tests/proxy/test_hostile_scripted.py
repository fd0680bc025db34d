"""The scripted hostile editor's other misbehaviours, through the real ``acp-bridge proxy``: a
reused id, frames nobody can route, answers given late or twice (issue 20). The floods are in
test_floods.py; these keep the fixture's every step honest."""

from __future__ import annotations

from typing import Any

import pytest

from tests.proxy.harness import agent
from tests.proxy.hostile import HostileEditor, open_hostile_editor

pytestmark = pytest.mark.anyio

ECHO = agent("echo_agent.py", "--quiet")
PERMISSION = agent("permission_agent.py", "--quiet")


async def _answers(editor: HostileEditor, count: int) -> list[dict[str, Any]]:
    return [await editor.event("answer") for _ in range(count)]


async def test_a_reused_id_is_refused_and_the_first_request_keeps_it() -> None:
    steps = ["handshake", "prompt-as 5 wait", "prompt-as 5 echo B", "wait-answer 5"]
    steps += ["cancel", "wait-answer 5", "close"]
    async with open_hostile_editor(steps, agent_argv=ECHO) as editor:
        refused, cancelled = await _answers(editor, 2)
        assert refused["error"]["data"] == {"duplicateId": 5}
        assert cancelled["result"] == {"stopReason": "cancelled"}
        assert (await editor.event("exited"))["code"] == 0


async def test_answers_to_frames_nobody_can_route_reach_the_editor() -> None:
    steps = ["handshake", "malformed", "wait-answer m-1", "wait-answer m-2", 'wait-for "id":null']
    async with open_hostile_editor([*steps, "close"], agent_argv=ECHO) as editor:
        for answer in await _answers(editor, 2):
            assert answer["error"]["code"] in (-32600, -32601)
        await editor.event("found")
        assert (await editor.event("exited"))["code"] == 0


@pytest.mark.parametrize("answers", ["late", "twice"])
async def test_a_permission_answered_late_or_twice_reaches_the_agent_once(answers: str) -> None:
    steps = ["handshake", "prompt go", "wait-for session/request_permission"]
    steps += ["answer-pending", "wait-for permission selected", "wait-answer", "close"]
    async with open_hostile_editor(steps, agent_argv=PERMISSION, answers=answers) as editor:
        request = await editor.event("request")
        assert str(request["id"]).startswith("acp-bridge/agent-")
        answered = await editor.event("answered")
        assert answered["times"] == (2 if answers == "twice" else 1)
        assert (await editor.event("answer"))["result"] == {"stopReason": "end_turn"}
        assert (await editor.event("exited"))["code"] == 0
