"""A crash with 1,000 sessions: the restarted agent gets every one back, the session with a
prompt waiting first, and no start-up timeout bounds the whole restore (each session has a
budget of its own). Through the real ``acp-bridge proxy`` and a fake agent whose
``session/load`` answers 15 ms later, loads overlapping as in an agent that serves requests
concurrently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import agent, open_editor, prompt_params, proxy

# One backend (the proxy runs on it): the case is heavy, and both see restores elsewhere.
pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["trio"])]

SESSIONS = 1000


async def _open_sessions(editor: Any, count: int) -> list[str]:
    """``count`` sessions, their session/new requests pipelined."""
    ids = [
        await editor.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        for _ in range(count)
    ]
    sessions = []
    for request_id in ids:
        answer = await editor.response(request_id)
        sessions.append(answer["result"]["sessionId"])
    return sessions


async def test_a_thousand_sessions_are_restored_with_the_waiting_one_first(
    tmp_path: Path,
) -> None:
    load_log = tmp_path / "loads.txt"
    flags = ["--quiet", "--history", str(tmp_path / "h.json")]
    flags += ["--load-delay-ms", "15", "--load-log", str(load_log)]
    # 1,000 loads of 15 ms take 15 s one after another: three times this start-up timeout,
    # which bounded the whole restore before (and the restart then counted as a crash).
    argv = proxy("--startup-timeout", "5", agent_argv=agent("echo_agent.py", *flags))
    async with open_editor(argv) as editor:
        first = await editor.handshake()
        sessions = [first, *await _open_sessions(editor, SESSIONS - 1)]
        assert len(set(sessions)) == SESSIONS
        waiting, crasher = sessions[700], sessions[500]
        hanging = await editor.request("session/prompt", prompt_params(waiting, "hang"))
        queued = await editor.request("session/prompt", prompt_params(waiting, "after the crash"))
        crashed = await editor.request("session/prompt", prompt_params(crasher, "crash KILL"))
        answers: dict[int, dict[str, Any]] = {}
        while len(answers) < 3:  # in whatever order they come
            message = await editor.until(
                lambda m: m.get("id") in (crashed, hanging, queued) and "method" not in m
            )
            answers[message["id"]] = message
        for cut in (crashed, hanging):
            assert answers[cut]["error"]["data"]["recoverable"] is True, answers[cut]
        # the queued prompt went to the new agent
        assert answers[queued]["result"] == {"stopReason": "end_turn"}
        # Every session came back: none is reported lost.
        for session_id in (sessions[0], sessions[-1], crasher):
            again = await editor.call("session/prompt", prompt_params(session_id, "again"))
            assert again["result"] == {"stopReason": "end_turn"}, again
        assert await editor.close_and_wait() == 0
    loads = load_log.read_text().split()
    assert loads[0] == waiting  # the session with a prompt waiting was restored first
    assert sorted(loads) == sorted(sessions)  # every session, each once
