"""Elicitation in the library: advertised only with a handler, in the handler's modes; answered
by it; -32602 for a mode not advertised; ``cancel`` when the turn is cancelled; complete seen."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.elicitation import ElicitationHandler, declining
from acp_bridge.client.events import UpdateReceived
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.client.turn import Turn
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.spec import AgentSpec
from acp_bridge.wire.elicitation import ElicitationRequest, ElicitationResponse

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
ECHO = AgentSpec([sys.executable, "-u", str(AGENTS / "echo_agent.py")], name="echo")
QUICK = ClientOptions(
    shutdown=ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5),
    startup_timeout_s=20,
)


class Frames:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, direction: str, line: bytes) -> None:
        self.lines.append((direction, json.loads(line)))

    def initialize(self) -> dict[str, Any]:
        for direction, message in self.lines:
            if direction == "out" and message.get("method") == "initialize":
                params: dict[str, Any] = message["params"]
                return params
        raise AssertionError("no initialize was sent")


async def one_turn(options: ClientOptions, text: str, tmp_path: Path) -> str:
    async with open_supervised_agent(ECHO, options) as agent:
        session = await agent.new_session(tmp_path)
        async with session.prompt(text) as turn:
            return await texts(turn)


async def texts(turn: Turn) -> str:
    with anyio.fail_after(20):
        events = [event async for event in turn]
    return "".join(
        str(e.raw.get("content", {}).get("text", ""))
        for e in events
        if isinstance(e, UpdateReceived) and e.raw.get("sessionUpdate") == "agent_message_chunk"
    )


async def test_without_a_handler_nothing_is_advertised_and_a_request_gets_invalid_params(
    tmp_path: Path,
) -> None:
    frames, refused = Frames(), []
    options = replace(QUICK, frame_observer=frames, on_capability_refused=refused.append)
    said = await one_turn(options, "elicit form", tmp_path)
    assert "elicitation" not in frames.initialize()["clientCapabilities"]
    assert said.startswith("elicit form error -32602 ")
    assert refused == ["elicitation/create"]


async def test_a_handler_is_advertised_in_its_modes_and_answers_the_form(tmp_path: Path) -> None:
    asked: list[ElicitationRequest] = []

    async def answer(request: ElicitationRequest) -> ElicitationResponse:
        asked.append(request)
        return ElicitationResponse.accept({"name": "Ada", "color": "green"})

    frames = Frames()
    handler = ElicitationHandler(answer, url=False)
    options = replace(QUICK, frame_observer=frames, elicitation=handler)
    said = await one_turn(options, "elicit form", tmp_path)
    assert frames.initialize()["clientCapabilities"]["elicitation"] == {"form": {}}
    assert said == 'elicit form accept {"name":"Ada","color":"green"}'
    assert [r.mode for r in asked] == ["form"]
    assert asked[0].requested_schema is not None
    assert list(asked[0].requested_schema["properties"]) == ["name", "age", "color", "ok"]
    # url is not advertised by this handler: refused, the handler never sees it
    said = await one_turn(options, "elicit url", tmp_path)
    assert said.startswith("elicit url error -32602 ")
    assert len(asked) == 1


async def test_an_accepted_url_is_completed_and_the_handler_hears_of_it(tmp_path: Path) -> None:
    completed: list[dict[str, Any]] = []
    done = anyio.Event()

    async def consent(request: ElicitationRequest) -> ElicitationResponse:
        assert request.url is not None and request.url.startswith("https://example.com/")
        return ElicitationResponse.accept()

    def on_complete(params: dict[str, Any]) -> None:
        completed.append(params)
        done.set()

    handler = ElicitationHandler(consent, on_complete=on_complete)
    async with open_supervised_agent(ECHO, replace(QUICK, elicitation=handler)) as agent:
        session = await agent.new_session(tmp_path)
        async with session.prompt("elicit url") as turn:
            said = await texts(turn)
        with anyio.fail_after(20):
            await done.wait()
    assert said == "elicit url accept null"
    assert completed == [{"elicitationId": "fake-url-1"}]


async def test_declining_declines_both_modes_and_tells_the_caller(tmp_path: Path) -> None:
    seen: list[str] = []
    options = replace(QUICK, elicitation=declining(lambda request: seen.append(request.mode)))
    assert await one_turn(options, "elicit form; elicit url", tmp_path) == (
        "elicit form decline nullelicit url decline null"
    )
    assert seen == ["form", "url"]


async def test_cancelling_the_turn_answers_a_pending_elicitation_cancel(tmp_path: Path) -> None:
    asked = anyio.Event()

    async def wait_forever(request: ElicitationRequest) -> ElicitationResponse:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    handler = ElicitationHandler(wait_forever)
    async with open_supervised_agent(ECHO, replace(QUICK, elicitation=handler)) as agent:
        session = await agent.new_session(tmp_path)
        async with session.prompt("elicit form") as turn:
            with anyio.fail_after(20):
                await asked.wait()
            await session.cancel()
            said = await texts(turn)
    assert said == "elicit form cancel null"
