"""The agent dies under the editor: the proxy restarts it, restores the sessions (load, replay
hidden), answers the cut prompt with a recoverable error, cancels the dead agent's requests
toward the editor, and reports sessions it could not restore as lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.proxy.harness import agent, chunk_text, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio


def _replayed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        m
        for m in messages
        if m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
    ]


async def test_a_crash_mid_turn_keeps_every_session(tmp_path: Path) -> None:
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    flags += ["--crash-once-file", str(tmp_path / "crashed")]
    recording = tmp_path / "rec.ndjson"
    argv = proxy("--record", str(recording), agent_argv=agent("echo_agent.py", *flags))
    async with open_editor(argv) as editor:
        first = await editor.handshake()
        second = (await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []}))["result"][
            "sessionId"
        ]
        await editor.call("session/prompt", prompt_params(first, "remember this"))
        await editor.call("session/prompt", prompt_params(second, "and this"))
        around: list[dict[str, Any]] = []
        crash = prompt_params(first, "echo bye; crash KILL")
        cut = await editor.response(await editor.request("session/prompt", crash), around)
        # The restore's session/load replayed both histories before this answer: none shown.
        assert [chunk_text(m) for m in around if m.get("method") == "session/update"] == ["bye"]
        error = cut["error"]
        assert error["data"]["recoverable"] is True
        assert error["data"]["agentExit"]["signal"] == 9
        assert "killed by SIGKILL" in error["message"] and "restored" in error["message"]
        after: list[dict[str, Any]] = []
        for session_id in (first, second):
            answer = await editor.response(
                await editor.request("session/prompt", prompt_params(session_id, "again")), after
            )
            assert answer["result"] == {"stopReason": "end_turn"}
        assert [chunk_text(m) for m in after if chunk_text(m)] == ["again"] * 2
        assert _replayed(after) == []  # session/load replayed both sessions: none of it shown
        assert await editor.close_and_wait() == 0
    # The new process got the editor's own initialize params, then a load of each session.
    entries = [json.loads(line) for line in recording.read_text().splitlines()]
    exited = next(
        i for i, e in enumerate(entries) if e.get("event", {}).get("event") == "agent_exited"
    )
    to_agent = [e["msg"] for e in entries[exited:] if e["dir"] == "bridge->agent"]
    assert to_agent[0]["method"] == "initialize" and to_agent[0]["id"].startswith("acp-bridge/")
    assert to_agent[0]["params"]["clientInfo"] == {"name": "t", "version": "1"}
    loads = [m["params"]["sessionId"] for m in to_agent[1:3] if m["method"] == "session/load"]
    assert sorted(loads) == sorted([first, second])  # restored concurrently: any order


async def test_requests_of_the_dead_agent_are_cancelled_toward_the_editor(tmp_path: Path) -> None:
    flags = ["--quiet", "--history", str(tmp_path / "h.json"), "--crash-on", "permission"]
    flags += ["--crash-once-file", str(tmp_path / "crashed"), "--exit-code", "7"]
    async with open_editor(proxy(agent_argv=agent("permission_agent.py", *flags))) as editor:
        session_id = await editor.handshake()
        prompt = await editor.request("session/prompt", prompt_params(session_id, "permission"))
        asked = await editor.until(lambda m: m.get("method") == "session/request_permission")
        cancel = await editor.until(lambda m: m.get("method") == "$/cancel_request")
        assert cancel["params"] == {"requestId": asked["id"]}
        error = (await editor.response(prompt))["error"]
        assert error["data"]["agentExit"]["returncode"] == 7
        assert error["data"]["recoverable"] is True
        # The late answer goes nowhere; the restored session works.
        option = asked["params"]["options"][0]["optionId"]
        await editor.send(
            {
                "jsonrpc": "2.0",
                "id": asked["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": option}},
            }
        )
        answer = await editor.call("session/prompt", prompt_params(session_id, "echo fine"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_session_that_cannot_be_restored_is_reported_lost(tmp_path: Path) -> None:
    flags = ["--quiet", "--no-load", "--crash-once-file", str(tmp_path / "crashed")]
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", *flags))) as editor:
        session_id = await editor.handshake()
        cut = await editor.call("session/prompt", prompt_params(session_id, "crash 3"))
        assert cut["error"]["data"]["recoverable"] is False
        assert "could not be restored" in cut["error"]["message"]
        lost = await editor.call("session/prompt", prompt_params(session_id, "hello"))
        assert lost["error"]["code"] == -32002
        assert "was lost when the agent restarted" in lost["error"]["message"]
        # The editor goes on with a new session on the restarted agent.
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        answer = await editor.call("session/prompt", prompt_params(new["result"]["sessionId"], "x"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_gone_for_good_answers_everything_then_exits_3() -> None:
    argv = proxy("--max-restarts", "0", agent_argv=agent("echo_agent.py", "--quiet"))
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        cut = await editor.request(
            "session/prompt", prompt_params(session_id, "sleep 100; crash 5")
        )
        queued = await editor.request("session/prompt", prompt_params(session_id, "echo later"))
        for request_id in (cut, queued):
            error = (await editor.response(request_id))["error"]
            assert "gone for good" in error["message"] and "exited with code 5" in error["message"]
            assert error["data"]["recoverable"] is False
        assert await editor.close_and_wait() == 3


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_crash_during_session_new_is_answered_and_the_editor_goes_on(
    tmp_path: Path,
) -> None:
    flags = ["--quiet", "--crash-on", "session/new", "--crash-once-file", str(tmp_path / "c")]
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", *flags))) as editor:
        await editor.call("initialize", {"protocolVersion": 1})
        cut = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        assert cut["error"]["message"].endswith("it was restarted; the request was not re-sent")
        assert cut["error"]["data"]["recoverable"] is True
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        session_id = new["result"]["sessionId"]
        answer = await editor.call("session/prompt", prompt_params(session_id, "ok"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_editors_mode_and_options_are_applied_again_after_a_restart(
    tmp_path: Path,
) -> None:
    flags = ["--quiet", "--settings", "--history", str(tmp_path / "h.json")]
    flags += ["--crash-once-file", str(tmp_path / "crashed")]
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", *flags))) as editor:
        session_id = await editor.handshake()
        await editor.call("session/set_mode", {"sessionId": session_id, "modeId": "ask"})
        await editor.call("session/set_mode", {"sessionId": session_id, "modeId": "code"})
        option = {"sessionId": session_id, "configId": "model", "value": "large"}
        await editor.call("session/set_config_option", option)
        await editor.call("session/prompt", prompt_params(session_id, "crash 4"))
        seen: list[dict[str, Any]] = []
        await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, "settings")), seen
        )
        assert [chunk_text(m) for m in seen] == ["settings mode=code model=large"]
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_restart_that_dies_during_its_load_is_followed_by_one_that_works(
    tmp_path: Path,
) -> None:
    flags = ["--quiet", "--history", str(tmp_path / "h.json"), "--crash-on", "session/load"]
    flags += ["--crash-once-file", str(tmp_path / "crashed")]
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", *flags))) as editor:
        session_id = await editor.handshake()
        await editor.call("session/prompt", prompt_params(session_id, "one two three four"))
        running = await editor.request("session/prompt", prompt_params(session_id, "echo x; wait"))
        around: list[dict[str, Any]] = []
        await editor.until(lambda m: chunk_text(m) is not None, seen=around)
        (first_agent,) = psutil.Process(editor.process.pid).children()
        first_agent.kill()  # from outside, mid-turn
        # The next process dies half-way through replaying the session; the one after it
        # restores the session; then the cut prompt is answered, and the next one runs.
        cut = await editor.response(running, around)
        assert cut["error"]["data"]["recoverable"] is True
        assert "killed by SIGKILL" in cut["error"]["message"]
        seen: list[dict[str, Any]] = []
        answer = await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, "again")), seen
        )
        assert answer["result"] == {"stopReason": "end_turn"}
        updates = [chunk_text(m) for m in around + seen if m.get("method") == "session/update"]
        assert updates == ["again"]  # "x" was consumed by until(); no replay of either load
        (last_agent,) = psutil.Process(editor.process.pid).children()
        assert last_agent.pid != first_agent.pid
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_line_cut_short_by_the_agents_death_never_reaches_the_editor(
    tmp_path: Path,
) -> None:
    # The agent writes half a session/update line (no newline) and exits: the editor's reader
    # parses every line it gets, so that half reaching it would fail the test.
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    flags += ["--crash-once-file", str(tmp_path / "crashed")]
    async with open_editor(proxy(agent_argv=agent("garbage_agent.py", *flags))) as editor:
        session_id = await editor.handshake()
        cut = await editor.call("session/prompt", prompt_params(session_id, "truncated 3"))
        assert cut["error"]["data"]["agentExit"]["returncode"] == 3
        answer = await editor.call("session/prompt", prompt_params(session_id, "echo ok"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0


async def test_a_prompt_the_agent_never_read_goes_to_its_replacement(tmp_path: Path) -> None:
    """A prompt whose write finds the agent's stdin closed never reached the agent: it waits
    for the restart and goes to the restored session, instead of being answered with the
    crash's recoverable error as a prompt the agent had read would be. (The interop matrix met
    this race: a prompt sent right after the agent stopped reading.) The fixture closes its
    stdin at the first prompt, answers it, and stays alive, so the next write is refused."""
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    flags += ["--shut-stdin-once-file", str(tmp_path / "shut")]
    argv = proxy(agent_argv=agent("echo_agent.py", *flags))
    async with open_editor(argv) as editor:
        session = await editor.handshake()
        first = await editor.call("session/prompt", prompt_params(session, "one"))
        assert first["result"] == {"stopReason": "end_turn"}
        seen: list[dict[str, Any]] = []
        request = await editor.request("session/prompt", prompt_params(session, "two"))
        second = await editor.response(request, seen)
        assert second.get("result") == {"stopReason": "end_turn"}, second
        assert [chunk_text(m) for m in seen if chunk_text(m)] == ["two"]
        assert _replayed(seen) == []  # the restore's replay is hidden, as always
        assert await editor.close_and_wait() == 0


async def test_a_prompt_never_read_whose_session_the_restore_lost_is_answered_lost(
    tmp_path: Path,
) -> None:
    """The same refused write, but the replacement cannot load sessions: the prompt the agent
    never read is answered with the lost-session error, never sent to a session that no longer
    exists, and never given the crash's recoverable error."""
    flags = ["--quiet", "--no-load", "--shut-stdin-once-file", str(tmp_path / "shut")]
    async with open_editor(proxy(agent_argv=agent("echo_agent.py", *flags))) as editor:
        session = await editor.handshake()
        first = await editor.call("session/prompt", prompt_params(session, "one"))
        assert first["result"] == {"stopReason": "end_turn"}
        second = await editor.call("session/prompt", prompt_params(session, "two"))
        assert second["error"]["code"] == -32002, second
        assert "was lost when the agent restarted" in second["error"]["message"]
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        answer = await editor.call("session/prompt", prompt_params(new["result"]["sessionId"], "x"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0
