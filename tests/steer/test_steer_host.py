"""Steering through the host (issue 24), against the steering fixture agents: the host
advertises steering; a steer (``_acp_bridge/send`` with ``steer``, or a client's
``_session/steering``) lands inside the running turn; it falls back to the queue on the agent
that lacks steering, and the client is told so; two clients steering one turn both reach the
agent, in order; a steer racing the turn's end reaches the agent exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.errors import RpcError
from acp_bridge.host import steering
from acp_bridge.host.serve import Host
from tests.host import harness
from tests.host.harness import connect, running_host
from tests.steer.helpers import BARE, STEERING, argv, deliveries, environment, logged

pytestmark = pytest.mark.anyio

Client = harness.TestClient


def _agent(script: str, tmp_path: Path, log: Path, hold: Path | None = None) -> list[str]:
    assignments = [f"{k}={v}" for k, v in environment(log, hold).items()]
    return ["env", *assignments, *argv(script, tmp_path)]


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _steer_params(sid: str, text: str, *, idle: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"sessionId": sid, "prompt": _text(text)}
    if idle is not None:
        params["_meta"] = {"steering": {"idleBehavior": idle}}
    return params


@asynccontextmanager
async def _hosted(tmp_path: Path, agent: list[str]) -> AsyncIterator[tuple[Host, Client]]:
    async with running_host(tmp_path, agent) as host:
        assert host.socket_path is not None
        async with connect(host.socket_path) as client:
            yield host, client


async def _new(client: Client, tmp_path: Path) -> str:
    answer = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    sid: str = answer["sessionId"]
    return sid


async def test_a_steer_through_the_host_lands_inside_the_running_turn(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    async with _hosted(tmp_path, _agent(STEERING, tmp_path, log)) as (host, client):
        init = await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert init["_meta"]["steering"] == {"supported": True}
        sid = await _new(client, tmp_path)
        answers: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                params = {"sessionId": sid, "prompt": _text("echo go; steers 1")}
                answers["prompt"] = await client.request("session/prompt", params)

            tg.start_soon(prompt)
            await client.wait_for(lambda c: "go" in c.texts())
            answers["steer"] = await client.request(
                "_acp_bridge/send",
                {"conversationId": sid, "content": _text("go left"), "steer": True},
            )
        assert answers["steer"] == {"seq": 2, "steered": {"into": 1, "outcome": "injected"}}
        assert answers["prompt"] == {"stopReason": "end_turn"}
        assert "[steer] go left " in client.texts()
        states = {m.seq: m.state for m in host.store.messages(sid)}
        assert states == {1: MessageState.DONE, 2: MessageState.STEERED}
    assert deliveries(log, "go left") == 1


async def test_a_steer_falls_back_to_the_queue_on_the_agent_that_lacks_it(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    async with _hosted(tmp_path, _agent(BARE, tmp_path, log)) as (host, client):
        sid = await _new(client, tmp_path)
        answers: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                params = {"sessionId": sid, "prompt": _text("echo go; wait 0.5")}
                answers["prompt"] = await client.request("session/prompt", params)

            tg.start_soon(prompt)
            await client.wait_for(lambda c: "go" in c.texts())
            answers["steer"] = await client.request(
                "_session/steering", _steer_params(sid, "echo fix it", idle="promptRequired")
            )
            answers["sent"] = await client.request(
                "_acp_bridge/send",
                {"conversationId": sid, "content": _text("echo then"), "steer": True},
            )
        # The message is the conversation's next turn: the client must not send it again.
        assert answers["steer"] == {
            "outcome": "startedNewTurn",
            "reason": "unsupported",
            "_meta": {"acpBridge": {"seq": 2, "queued": {"reason": "unsupported"}}},
        }
        assert answers["sent"] == {"seq": 3, "queued": {"reason": "unsupported"}}
        last = {"sessionId": sid, "prompt": _text("echo last")}
        assert await client.request("session/prompt", last) == {"stopReason": "end_turn"}
        states = [m.state for m in host.store.messages(sid)]
        assert states == [MessageState.DONE] * 4
    prompts = [line for line in logged(log) if line.startswith("prompt ")]
    assert prompts == [
        "prompt echo go; wait 0.5",
        "prompt echo fix it",
        "prompt echo then",
        "prompt echo last",
    ]
    assert not [line for line in logged(log) if line.startswith("ext ")]  # no probe, no relay


async def test_an_idle_steer_opting_in_to_prompt_required_is_refused_uncommitted(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    async with _hosted(tmp_path, _agent(STEERING, tmp_path, log)) as (host, client):
        sid = await _new(client, tmp_path)
        answer = await client.request(
            "_session/steering", _steer_params(sid, "echo idle", idle="promptRequired")
        )
        assert answer == {"outcome": "promptRequired", "reason": "noRunningTurn"}
        assert host.store.messages(sid) == []
        # Without the opt-in, the extension's default: it becomes a turn of its own.
        answer = await client.request("_session/steering", _steer_params(sid, "echo idle"))
        assert (answer["outcome"], answer["reason"]) == ("startedNewTurn", "no_running_turn")
        last = {"sessionId": sid, "prompt": _text("echo last")}
        assert await client.request("session/prompt", last) == {"stopReason": "end_turn"}
    assert deliveries(log, "echo idle") == 1


async def test_two_clients_steering_one_turn_both_reach_it_in_order(tmp_path: Path) -> None:
    log, hold = tmp_path / "agent.log", tmp_path / "answer-steers"
    async with running_host(tmp_path, _agent(STEERING, tmp_path, log, hold)) as host:
        socket = host.socket_path or tmp_path
        async with connect(socket, name="a") as a, connect(socket, name="b") as b:
            sid = await _new(a, tmp_path)
            await b.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
            answers: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:

                async def call(key: str, client: Client, method: str, params: Any) -> None:
                    answers[key] = await client.request(method, params)

                prompt = {"sessionId": sid, "prompt": _text("echo go; steers 2")}
                tg.start_soon(call, "prompt", a, "session/prompt", prompt)
                await a.wait_for(lambda c: "go" in c.texts())
                conversation = host.find(sid).hub.conversation
                assert conversation is not None
                tg.start_soon(call, "one", a, "_session/steering", _steer_params(sid, "one"))
                with anyio.fail_after(20):  # in flight: its answer is held
                    await steering.wait_entered(conversation, 1)
                tg.start_soon(call, "two", b, "_session/steering", _steer_params(sid, "two"))
                with anyio.fail_after(20):  # b's steer waits for a's outcome
                    await steering.wait_entered(conversation, 2)
                hold.touch()
            assert answers["one"]["outcome"] == answers["two"]["outcome"] == "injected"
            assert answers["one"]["_meta"]["acpBridge"] == {"seq": 2, "steeredInto": 1}
            assert answers["two"]["_meta"]["acpBridge"] == {"seq": 3, "steeredInto": 1}
            assert answers["prompt"] == {"stopReason": "end_turn"}
            assert [t for t in a.texts() if t.startswith("[steer]")] == [
                "[steer] one ",
                "[steer] two ",
            ]
            await b.wait_for(lambda c: "[steer] two " in c.texts())
            assert [t for t in b.texts() if t.startswith("[steer]")] == [
                "[steer] one ",
                "[steer] two ",
            ]
    assert [line for line in logged(log) if line.startswith("steer ")] == ["steer one", "steer two"]


async def test_a_steer_racing_the_turn_end_reaches_the_agent_exactly_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    rounds = 8
    async with _hosted(tmp_path, _agent(STEERING, tmp_path, log)) as (host, client):
        sid = await _new(client, tmp_path)
        kinds: list[str] = []
        for i in range(rounds):
            async with anyio.create_task_group() as tg:
                turn = {"sessionId": sid, "prompt": _text(f"echo turn-{i}; sleep 20")}
                tg.start_soon(client.request, "session/prompt", turn)
                await client.wait_for(lambda c, i=i: f"turn-{i}" in c.texts())
                await anyio.sleep((i % 4) * 0.01)  # aim around the turn's end (20 ms)
                answer = await client.request(
                    "_acp_bridge/send",
                    {"conversationId": sid, "content": _text(f"echo race {i}"), "steer": True},
                )
            kinds.append(next(k for k in ("steered", "queued") if k in answer))
        last = {"sessionId": sid, "prompt": _text("echo last")}
        assert await client.request("session/prompt", last) == {"stopReason": "end_turn"}
        states = {m.state for m in host.store.messages(sid)}
        assert states <= {MessageState.DONE, MessageState.STEERED}
    for i in range(rounds):
        assert deliveries(log, f"echo race {i}") == 1, logged(log)


async def test_the_drafts_session_inject_is_a_steer_too_and_interrupt_with_steer_is_refused(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    async with _hosted(tmp_path, _agent(STEERING, tmp_path, log)) as (host, client):
        sid = await _new(client, tmp_path)
        both = {"conversationId": sid, "content": _text("x"), "steer": True, "interrupt": True}
        with pytest.raises(RpcError) as refused:
            await client.request("_acp_bridge/send", both)
        assert refused.value.code == -32602
        answers: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                params = {"sessionId": sid, "prompt": _text("echo go; steers 1")}
                answers["prompt"] = await client.request("session/prompt", params)

            tg.start_soon(prompt)
            await client.wait_for(lambda c: "go" in c.texts())
            inject = {**_steer_params(sid, "go down"), "mode": "steer"}
            answers["inject"] = await client.request("session/inject", inject)
        assert answers["inject"]["outcome"] == "injected"
        assert answers["prompt"] == {"stopReason": "end_turn"}
        assert [m.state for m in host.store.messages(sid)] == [
            MessageState.DONE,
            MessageState.STEERED,
        ]
    assert deliveries(log, "go down") == 1
