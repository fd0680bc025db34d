"""The reference agent driven over raw ACP through acp-bridge's own peer, one agent process for
the whole walk (litellm's import is paid once, in the child). Every frame it wrote is then
checked against the official SDK's schema models, and every stdout line must be a frame.

Pinned to asyncio: the walk costs an agent start, and the client side here is the rpc layer,
which the rpc tests already run on both backends.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.errors import ConnectionClosedError, RpcError
from tests.agents.agent_client import (
    RawClient,
    agent_argv,
    check_against_sdk,
    open_agent_client,
    requires_litellm,
)

UNKNOWN_MODEL = "nonexistentmodel-xyz"

pytestmark = [
    requires_litellm,
    pytest.mark.anyio,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
    # Each process imports litellm (seconds, several times that on a loaded machine): the
    # suite's 60 s is no safety net for a walk of several agent processes.
    pytest.mark.timeout(180),
]


async def test_agent_walk(tmp_path: Path) -> None:
    history = tmp_path / "history.db"
    work = tmp_path / "project"
    work.mkdir()
    # A second agent process on the same history (on litellm's own mock_response): after the
    # first one crashed, it loads the session, replays it, and the conversation goes on. It is
    # started now so that its litellm import (seconds) overlaps the walk; it knows nothing of
    # the session but what the first process stored.
    restarted = agent_argv(history)
    restarted[restarted.index("--mock-script") : restarted.index("--mock-script") + 2] = [
        "--mock-response",
        "Still here.",
    ]
    restarted[restarted.index("--models") + 1] = f"gpt-4o,{UNKNOWN_MODEL}"
    async with open_agent_client(restarted) as later:
        async with open_agent_client(agent_argv(history)) as client:
            init = await client.initialize()
            caps = init["agentCapabilities"]
            assert caps["loadSession"] is True
            assert {"list", "resume"} <= set(caps["sessionCapabilities"])
            new = await client.call("session/new", {"cwd": str(work), "mcpServers": []})
            sid = new["sessionId"]
            model_option = next(o for o in new["configOptions"] if o["id"] == "model")
            assert model_option["category"] == "model"
            assert model_option["currentValue"] == "gpt-4o-mini"

            await _streaming(client, sid)
            await _tools(client, sid, work)
            await _cancels(client, sid)
            await _bounds_and_errors(client, sid)
            await _mode_and_model(client, sid, work)
            listed = await client.call("session/list", {"cwd": str(work)})
            assert [s["sessionId"] for s in listed["sessions"]] == [sid]
            assert listed["sessions"][0]["title"] == "stream please"

            cost_before_crash = _usage_updates(client)[-1]["cost"]["amount"]
            start = len(client.updates)
            with pytest.raises(ConnectionClosedError):
                await client.prompt(sid, "crash now")
            await client.process.wait()
            assert client.process.returncode == 70
            assert "about to crash" in client.text(start)
            frames = check_against_sdk(client.incoming, client.sent_methods)
            assert frames > 50

        await later.initialize()
        with pytest.raises(RpcError) as unknown:
            await later.call(
                "session/load", {"sessionId": "nope", "cwd": str(work), "mcpServers": []}
            )
        assert unknown.value.code == -32002
        await later.call("session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        replay = later.kinds()
        assert replay[0] == "user_message_chunk"
        assert "tool_call" in replay and "usage_update" not in replay
        replayed_text = later.text()
        assert "one two three four five" in replayed_text and "Wrote it." in replayed_text
        assert "about to crash" not in replayed_text  # cut by the crash, never stored
        start = len(later.updates)
        answer = await later.prompt(sid, "hello again")
        assert answer["stopReason"] == "end_turn"
        assert later.text(start) == "Still here."
        # The session's cost goes on from what was stored: neither reset by the restart nor
        # counted again by the replay (one more request costs far less than all before it).
        cost_after = _usage_updates(later)[-1]["cost"]["amount"]
        assert cost_before_crash < cost_after < 2 * cost_before_crash
        # the model saw the whole restored history: far more input than this one line
        assert answer["usage"]["inputTokens"] > 100

        # A model litellm cannot route: a clear error naming it (litellm would print its
        # "Provider List" here; stdout must still carry frames only).
        await later.call(
            "session/set_config_option",
            {"sessionId": sid, "configId": "model", "value": UNKNOWN_MODEL},
        )
        with pytest.raises(RpcError) as unroutable:
            await later.prompt(sid, "hello?")
        assert unroutable.value.code == -32603
        assert unroutable.value.data["kind"] == "bad_request"
        assert UNKNOWN_MODEL in unroutable.value.message
        assert "Provider NOT provided" in unroutable.value.message
        check_against_sdk(later.incoming, later.sent_methods)


async def _streaming(client: RawClient, sid: str) -> None:
    start = len(client.updates)
    answer = await client.prompt(sid, "stream please")
    assert answer["stopReason"] == "end_turn"
    assert client.text(start) == "one two three four five"
    assert client.text(start, "agent_thought_chunk") == "thinking about it"
    chunks = [u for u in client.updates[start:] if u["sessionUpdate"] == "agent_message_chunk"]
    assert len(chunks) == 5 and len({c["messageId"] for c in chunks}) == 1
    usage = [u for u in client.updates[start:] if u["sessionUpdate"] == "usage_update"]
    assert len(usage) == 1 and usage[0]["size"] == 128000  # gpt-4o-mini's window
    assert usage[0]["cost"]["currency"] == "USD" and usage[0]["cost"]["amount"] > 0
    assert answer["usage"]["totalTokens"] == usage[0]["used"] > 0


async def _tools(client: RawClient, sid: str, work: Path) -> None:
    # Write, allowed once: pending -> permission (with the diff) -> in_progress -> completed.
    start = len(client.updates)
    answer = await client.prompt(sid, "write the file")
    assert answer["stopReason"] == "end_turn"
    assert (work / "out.txt").read_text() == "hello\n"
    calls = [u for u in client.updates[start:] if u["sessionUpdate"].startswith("tool_call")]
    assert [c.get("status") for c in calls] == ["pending", "in_progress", "completed"]
    assert calls[0]["kind"] == "edit" and calls[0]["locations"] == [{"path": str(work / "out.txt")}]
    asked = client.permissions[-1]
    assert {o["kind"] for o in asked["options"]} == {"allow_once", "allow_always", "reject_once"}
    diff = asked["toolCall"]["content"][0]
    path = str(work / "out.txt")
    assert diff == {"type": "diff", "path": path, "oldText": None, "newText": "hello\n"}
    assert client.text(start) == "Writing it.Wrote it."

    # Rejected: the file is untouched, the call fails, the model goes on.
    (work / "out.txt").write_text("kept\n")
    client.permission_answer = lambda _: "reject"
    start = len(client.updates)
    answer = await client.prompt(sid, "write it again")
    assert answer["stopReason"] == "end_turn"
    assert (work / "out.txt").read_text() == "kept\n"
    assert _statuses(client, start) == ["pending", "failed"]

    # allow_always: asked once, then remembered for the session.
    client.permission_answer = lambda _: "allow-always"
    asked_before = len(client.permissions)
    await client.prompt(sid, "write once more")
    await client.prompt(sid, "write yet again")
    assert len(client.permissions) == asked_before + 1
    assert (work / "out.txt").read_text() == "hello\n"

    # A command through the client's terminal, and a read; reads need no permission.
    client.permission_answer = lambda _: "allow"
    asked_before = len(client.permissions)
    start = len(client.updates)
    assert (await client.prompt(sid, "run it"))["stopReason"] == "end_turn"
    run_updates = [u for u in client.updates[start:] if u["sessionUpdate"] == "tool_call_update"]
    assert run_updates[0]["content"][0]["type"] == "terminal"
    assert run_updates[-1]["status"] == "completed"
    assert len(client.permissions) == asked_before + 1 and client.terminals_released()
    start = len(client.updates)
    await client.prompt(sid, "read it back")
    read = [u for u in client.updates[start:] if u["sessionUpdate"] == "tool_call_update"]
    assert read[-1]["content"][0]["content"]["text"] == "hello\n"
    # A listing runs a command in the client's terminal: it asks as any command does.
    start = len(client.updates)
    await client.prompt(sid, "list the dir")
    assert len(client.permissions) == asked_before + 2
    assert client.permissions[-1]["toolCall"]["kind"] == "search"
    listed = [u for u in client.updates[start:] if u["sessionUpdate"] == "tool_call_update"]
    assert listed[-1]["status"] == "completed"


async def _cancels(client: RawClient, sid: str) -> None:
    # Mid-stream: the answer is `cancelled`, within milliseconds of session/cancel.
    async with anyio.create_task_group() as tg:
        answers: list[Any] = []

        async def prompt(text: str) -> None:
            answers.append(await client.prompt(sid, text))

        start = len(client.updates)
        tg.start_soon(prompt, "slow one")
        await client.wait_for(lambda: len(client.text(start)) > 10)
        sent = time.perf_counter()
        await client.peer.notify("session/cancel", {"sessionId": sid})
    elapsed = time.perf_counter() - sent
    assert answers[0]["stopReason"] == "cancelled"
    assert elapsed < 0.5, elapsed

    # Mid-tool (a command running in the client's terminal): cancelled, the tool call ends
    # failed before the answer, the terminal is released.
    async with anyio.create_task_group() as tg:
        answers.clear()
        start = len(client.updates)
        tg.start_soon(prompt, "sleep a while")
        await client.wait_for(lambda: "in_progress" in _statuses(client, start))
        await client.peer.notify("session/cancel", {"sessionId": sid})
    assert answers[0]["stopReason"] == "cancelled"
    assert _statuses(client, start)[-1] == "failed"
    assert client.terminals_released()

    # Mid-permission: the client answers the question cancelled, as the protocol asks.
    gate = anyio.Event()

    async def wait_then_cancel(_: Any) -> None:
        await gate.wait()
        return None

    client.permission_answer = wait_then_cancel
    async with anyio.create_task_group() as tg:
        answers.clear()
        asked = len(client.permissions)
        tg.start_soon(prompt, "run during cancel")
        await client.wait_for(lambda: len(client.permissions) > asked)
        await client.peer.notify("session/cancel", {"sessionId": sid})
        gate.set()
    assert answers[0]["stopReason"] == "cancelled"
    client.permission_answer = lambda _: "allow"

    # A cancel written right behind its prompt (one write: the agent reads both before the
    # prompt's handler starts) still cancels that prompt.
    raced_params = {"sessionId": sid, "prompt": [{"type": "text", "text": "slow and raced"}]}
    with anyio.fail_after(10):
        await client.send_raw(
            {"jsonrpc": "2.0", "id": "raced", "method": "session/prompt", "params": raced_params},
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}},
        )
        raced = await client.raw_answer("raced")
    assert raced["result"]["stopReason"] == "cancelled"
    # The session still works after four cancels (the history stayed valid).
    assert (await client.prompt(sid, "stream please"))["stopReason"] == "end_turn"


def _usage_updates(client: RawClient) -> list[dict[str, Any]]:
    return [u for u in client.updates if u["sessionUpdate"] == "usage_update"]


def _statuses(client: RawClient, start: int) -> list[str]:
    return [u["status"] for u in client.updates[start:] if u.get("status")]


async def _bounds_and_errors(client: RawClient, sid: str) -> None:
    answer = await client.prompt(sid, "loop forever")
    assert answer["stopReason"] == "max_turn_requests"  # --max-turn-requests 3
    start = len(client.updates)
    answer = await client.prompt(sid, "busy provider")  # rate-limited twice, then answers
    assert answer["stopReason"] == "end_turn" and client.text(start) == "after retries"
    with pytest.raises(RpcError) as refused:
        await client.prompt(sid, "forbidden")
    assert refused.value.code == -32000
    assert "invalid x-api-key" in refused.value.message
    assert refused.value.data["kind"] == "auth"
    assert "Traceback" not in refused.value.message


async def _mode_and_model(client: RawClient, sid: str, work: Path) -> None:
    await client.call("session/set_mode", {"sessionId": sid, "modeId": "ask"})
    (work / "out.txt").write_text("before\n")
    start = len(client.updates)
    await client.prompt(sid, "write in ask mode")
    assert (work / "out.txt").read_text() == "before\n"  # write_file is not offered in ask
    failed = [u for u in client.updates[start:] if u.get("status") == "failed"]
    assert "not available" in failed[0]["content"][0]["content"]["text"]
    result = await client.call(
        "session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "code"}
    )
    assert {o["id"]: o["currentValue"] for o in result["configOptions"]}["mode"] == "code"

    start = len(client.updates)
    await client.prompt(sid, "stream please")
    mini = [u for u in client.updates[start:] if u["sessionUpdate"] == "usage_update"][-1]
    result = await client.call(
        "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "gpt-4o"}
    )
    assert {o["id"]: o["currentValue"] for o in result["configOptions"]}["model"] == "gpt-4o"
    start = len(client.updates)
    await client.prompt(sid, "stream please")
    big = [u for u in client.updates[start:] if u["sessionUpdate"] == "usage_update"][-1]
    # gpt-4o is priced higher than gpt-4o-mini: the session's cost grows faster
    assert big["cost"]["amount"] - mini["cost"]["amount"] > mini["cost"]["amount"]
    with pytest.raises(RpcError) as bad:
        await client.call(
            "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "x"}
        )
    assert bad.value.code == -32602
