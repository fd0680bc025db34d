"""--record writes every message with time and direction; acp-bridge replay serves a
recording as an agent, and a client that diverges from it gets a clear error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import ROOT, agent, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio

RECORDINGS = ROOT / "fixtures" / "recordings"
SECRET = "sk-abcdefghijklmnopqrstuvwx"


def replay(path: Path) -> list[str]:
    return [sys.executable, "-m", "acp_bridge", "replay", str(path)]


async def _permission_session(argv: list[str]) -> list[dict[str, Any]]:
    """A session with a permission request; every message the editor read."""
    async with open_editor(argv) as editor:
        await editor.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        server = {
            "name": "tools",
            "command": "/bin/true",
            "args": [],
            "env": [{"name": "API_KEY", "value": SECRET}],
        }
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": [server]})
        session_id = new["result"]["sessionId"]
        prompt = await editor.request("session/prompt", prompt_params(session_id, "permission"))
        asked = await editor.until(lambda m: m.get("method") == "session/request_permission")
        allow = next(o for o in asked["params"]["options"] if o["kind"] == "allow_once")
        await editor.send(
            {
                "jsonrpc": "2.0",
                "id": asked["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": allow["optionId"]}},
            }
        )
        assert (await editor.response(prompt))["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0
        return [json.loads(line) for line in editor.lines]


async def test_record_then_replay_gives_the_same_answers(tmp_path: Path) -> None:
    recording = tmp_path / "session.ndjson"
    argv = proxy("--record", str(recording), agent_argv=agent("permission_agent.py", "--quiet"))
    recorded = await _permission_session(argv)
    entries = [json.loads(line) for line in recording.read_text().splitlines()]
    messages = [e for e in entries if "msg" in e]
    assert [e["t"] for e in messages] == sorted(e["t"] for e in messages)
    to_editor = [e["msg"] for e in messages if e["dir"] == "bridge->editor"]
    assert to_editor == recorded  # every message the editor read, in order
    for direction in ("editor->bridge", "bridge->agent", "agent->bridge"):
        assert sum(e["dir"] == direction for e in messages) >= 4
    # Replay serves the agent's side as the agent wrote it; the proxy had put its own id on
    # the agent's request toward the editor. Everything else is the same.
    replayed = await _permission_session(replay(recording))
    asked = [i for i, m in enumerate(recorded) if m.get("method") == "session/request_permission"]
    assert [i for i, m in enumerate(replayed) if m.get("method")] == [
        i for i, m in enumerate(recorded) if m.get("method")
    ]
    assert str(recorded[asked[0]]["id"]).startswith("acp-bridge/agent-")
    assert [_without_id(m) for m in replayed] == [_without_id(m) for m in recorded]


def _without_id(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("method") == "session/request_permission":
        return {k: v for k, v in message.items() if k != "id"}
    return message


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_redact_masks_secrets_in_the_recording_only(tmp_path: Path) -> None:
    recording = tmp_path / "session.ndjson"
    argv = proxy(
        "--record", str(recording), "--redact", agent_argv=agent("permission_agent.py", "--quiet")
    )
    await _permission_session(argv)
    text = recording.read_text()
    assert SECRET not in text and '"value":"***"' in text
    assert recording.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_diverging_client_fails_clearly() -> None:
    async with open_editor(replay(RECORDINGS / "echo-session.ndjson")) as editor:
        await editor.call("initialize", {"protocolVersion": 1})
        wrong = await editor.call("session/list", {})
        assert wrong["error"]["message"].startswith("replay diverged after 1 of ")
        assert (
            "expected session/new (request), got session/list (request)"
            in wrong["error"]["message"]
        )
        assert await editor.close_and_wait() == 4


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_stored_recording_replays() -> None:
    async with open_editor(replay(RECORDINGS / "echo-session.ndjson")) as editor:
        session_id = await editor.handshake()
        seen: list[dict[str, Any]] = []
        answer = await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, "hello world")), seen
        )
        assert answer["result"] == {"stopReason": "end_turn"}
        assert [m["params"]["update"]["content"]["text"] for m in seen] == ["hello ", "world"]
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_stored_redacted_recording_with_a_permission_request_replays() -> None:
    messages = await _permission_session(replay(RECORDINGS / "permission-session.ndjson"))
    assert any(m.get("method") == "session/request_permission" for m in messages)


async def test_a_proxy_killed_outright_keeps_its_recording(tmp_path: Path) -> None:
    """Before, the recording was flushed only when the proxy stopped: a ``kill -9`` lost
    everything still in its 1 MiB buffer, i.e. a whole short session."""
    import signal

    import anyio

    recording = tmp_path / "session.ndjson"
    argv = proxy("--record", str(recording), agent_argv=agent("echo_agent.py", "--quiet"))
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        answer = await editor.call("session/prompt", prompt_params(session_id, "kept"))
        assert answer["result"] == {"stopReason": "end_turn"}

        def recorded_answer() -> bool:
            lines = recording.read_text().splitlines() if recording.exists() else []
            return any('"stopReason":"end_turn"' in line for line in lines)

        # Another process writes the file: its contents are the only event to wait on.
        with anyio.fail_after(10):
            while not recorded_answer():  # noqa: ASYNC110
                await anyio.sleep(0.05)
        editor.process.send_signal(signal.SIGKILL)
        await editor.process.wait()
    entries = [json.loads(line) for line in recording.read_text().splitlines()]
    directions = {e["dir"] for e in entries if "msg" in e}
    assert directions >= {"editor->bridge", "bridge->agent", "agent->bridge", "bridge->editor"}
