"""--record writes every message with time and direction; acp-bridge replay serves a
recording as an agent, and a client that diverges from it gets a clear error. A recording is
a debugging aid, never a risk (#20): a failed write or the cap stops the recording and not the
session, every line is a whole JSON object, and --redact masks whatever a secret-named key
holds. Hostile files given to replay: tests/proxy/test_replay_hostile.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import ROOT, Editor, agent, chunk_text, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio

RECORDINGS = ROOT / "fixtures" / "recordings"
SECRET = "sk-abcdefghijklmnopqrstuvwx"

_CAPTURED = (
    "import os, resource, sys\n"
    "limit, stderr_path, *argv = sys.argv[1:]\n"
    "if limit:\n"
    "    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))\n"
    "os.dup2(os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)\n"
    "os.execv(argv[0], argv)\n"
)
"""Runs argv with its stderr in a file and, if asked, under a file size limit (RLIMIT_FSIZE:
a write past it fails with EFBIG, as a full disk fails with ENOSPC; Python ignores SIGXFSZ)."""


def captured(argv: list[str], stderr: Path, *, file_size_limit: int | None = None) -> list[str]:
    limit = "" if file_size_limit is None else str(file_size_limit)
    return [sys.executable, "-c", _CAPTURED, limit, str(stderr), *argv]


def replay(path: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "acp_bridge", "replay", *options, str(path)]


def _not_a_json_number(name: str) -> Any:
    raise ValueError(f"{name} in a recording")


def entries_of(recording: Path) -> list[dict[str, Any]]:
    """Every line of the recording, each a whole JSON object (strict: no NaN)."""
    data = recording.read_bytes()
    assert data.endswith(b"\n"), data[-200:]
    lines = data.split(b"\n")[:-1]
    entries = [json.loads(line, parse_constant=_not_a_json_number) for line in lines]
    assert all(isinstance(entry, dict) for entry in entries)
    return entries


def recording_lines_in(stderr: Path) -> list[str]:
    text = stderr.read_text()
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if "record" in line]


async def answer_despite_non_json(
    editor: Editor, request_id: int, seen: list[dict[str, Any]]
) -> dict[str, Any]:
    """The response to ``request_id``; the messages before it go to ``seen``, and lines that
    are not JSON (relayed as the agent wrote them) are skipped."""
    while True:
        try:
            message = await editor.receive()
        except ValueError:
            continue
        if message.get("id") == request_id and "method" not in message:
            return message
        seen.append(message)


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


async def test_a_full_disk_stops_the_recording_and_never_the_session(tmp_path: Path) -> None:
    """#20 defect 6: a write that failed (EFBIG here, under a file size limit; ENOSPC and EIO
    take the same path) killed the proxy with a traceback (exit 1): the pending prompt was
    never answered and the recording's last line was cut."""
    recording, stderr = tmp_path / "session.ndjson", tmp_path / "stderr.txt"
    limit = 256 * 1024
    argv = proxy("--record", str(recording), agent_argv=agent("echo_agent.py", "--quiet"))
    async with open_editor(captured(argv, stderr, file_size_limit=limit)) as editor:
        session_id = await editor.handshake()
        # One update of 1 MiB: its recording line cannot fit under the limit.
        answer = await editor.call("session/prompt", prompt_params(session_id, "huge 1048576"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert max(len(line) for line in editor.lines) == 1048576 - 1
        seen: list[dict[str, Any]] = []
        again = await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, "still here")), seen
        )
        assert again["result"] == {"stopReason": "end_turn"}
        assert [chunk_text(m) for m in seen] == ["still ", "here"]
        assert await editor.close_and_wait() == 0
    assert recording.stat().st_size <= limit
    entries = entries_of(recording)
    assert any(e.get("msg", {}).get("method") == "session/new" for e in entries)
    stopped = entries[-1]["event"]
    assert stopped["event"] == "recording_stopped" and stopped["reason"] == "write_failed"
    assert "EFBIG" in stopped["detail"]
    [logged] = recording_lines_in(stderr)
    assert "stopped" in logged and "EFBIG" in logged and str(recording) in logged


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_recording_stops_at_its_cap_and_says_so_in_its_last_line(
    tmp_path: Path,
) -> None:
    """#20 defect 6: the recording had no cap (about 2.4 times the traffic). The cap counts
    the whole file, so a later session appending to a full recording adds nothing."""
    recording, stderr = tmp_path / "session.ndjson", tmp_path / "stderr.txt"
    cap = 20_000
    argv = proxy(
        "--record",
        str(recording),
        "--record-max-bytes",
        str(cap),
        agent_argv=agent("echo_agent.py", "--quiet"),
    )
    async with open_editor(captured(argv, stderr)) as editor:
        session_id = await editor.handshake()
        seen: list[dict[str, Any]] = []
        answer = await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, "flood 500")), seen
        )
        assert answer["result"] == {"stopReason": "end_turn"} and len(seen) == 500
        assert await editor.close_and_wait() == 0
    size = recording.stat().st_size
    assert cap - 1000 < size <= cap
    entries = entries_of(recording)
    stopped = entries[-1]["event"]
    assert stopped["event"] == "recording_stopped" and stopped["reason"] == "max_bytes"
    assert "--record-max-bytes" in stopped["detail"]
    [logged] = recording_lines_in(stderr)
    assert "--record-max-bytes" in logged

    async with open_editor(captured(argv, stderr)) as editor:
        await editor.handshake()
        assert await editor.close_and_wait() == 0
    assert recording.stat().st_size == size
    [logged] = recording_lines_in(stderr)
    assert f"already holds {size} bytes" in logged


async def test_lines_that_are_not_json_are_recorded_under_raw_and_the_recording_replays(
    tmp_path: Path,
) -> None:
    """#20 defect 7: an agent line that starts like a session/update but is not JSON was
    written into the recording as it came (and NaN with it), so the recording stopped being
    NDJSON and replay refused the whole file."""
    recording = tmp_path / "session.ndjson"
    argv = proxy("--record", str(recording), agent_argv=agent("garbage_agent.py", "--quiet"))
    program = "broken-update; nan-update; echo done"
    async with open_editor(argv) as editor:
        session_id = await editor.handshake()
        request_id = await editor.request("session/prompt", prompt_params(session_id, program))
        seen: list[dict[str, Any]] = []
        answer = await answer_despite_non_json(editor, request_id, seen)
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0
    entries = entries_of(recording)
    raw = [e for e in entries if "raw" in e and e["dir"] == "agent->bridge"]
    assert [("oops" in e["raw"], "NaN" in e["raw"]) for e in raw] == [(True, False), (False, True)]
    assert all(isinstance(e["raw"], str) and "msg" not in e for e in raw)

    async with open_editor(replay(recording)) as editor:
        session_id = await editor.handshake()
        seen = []
        answer = await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, program)), seen
        )
        assert answer["result"] == {"stopReason": "end_turn"}
        assert [chunk_text(m) for m in seen] == ["after-broken", "after-nan", "done"]
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_allow_partial_replays_a_recording_whose_last_line_is_cut(tmp_path: Path) -> None:
    """#20 defect 7: a recording whose writer died mid-line was refused even with
    --allow-partial."""
    recording = tmp_path / "cut.ndjson"
    whole = (RECORDINGS / "echo-session.ndjson").read_bytes()
    last = whole.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    recording.write_bytes(whole + last[: len(last) // 2])
    async with open_editor(replay(recording, "--allow-partial")) as editor:
        session_id = await editor.handshake()
        seen: list[dict[str, Any]] = []
        answer = await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, "hello world")), seen
        )
        assert answer["result"] == {"stopReason": "end_turn"}
        assert [chunk_text(m) for m in seen] == ["hello ", "world"]
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_redact_masks_whatever_a_secret_named_key_holds(tmp_path: Path) -> None:
    """#20 defect 8: a secret-named key holding an object or a list was left in clear. Token
    counts (numbers under a key ending in "tokens") are not secrets, and stay."""
    recording = tmp_path / "session.ndjson"
    argv = proxy(
        "--record", str(recording), "--redact", agent_argv=agent("echo_agent.py", "--quiet")
    )
    secrets = {
        "token": {"value": "plain-one", "expires": 3600},
        "apiKeys": ["plain-two", "plain-three"],
        "credentials": {"user": "me", "password": "plain-four"},
        "clientSecret": 12345,
        "env": {"HOME": "plain-five"},
    }
    async with open_editor(argv) as editor:
        init = await editor.call(
            "initialize", {"protocolVersion": 1, "clientCapabilities": {"_meta": secrets}}
        )
        assert "result" in init
        new = await editor.call(
            "session/new", {"cwd": "/tmp", "mcpServers": [], "_meta": {"auth": secrets}}
        )
        session_id = new["result"]["sessionId"]
        answer = await editor.call("session/prompt", prompt_params(session_id, "tokens 12 34"))
        assert answer["result"]["usage"]["inputTokens"] == 12
        assert await editor.close_and_wait() == 0
    text = recording.read_text()
    assert "plain-" not in text and "12345" not in text
    masked = [e["msg"] for e in entries_of(recording) if e.get("dir") == "bridge->agent"]
    meta = masked[0]["params"]["clientCapabilities"]["_meta"]
    assert meta == {
        "token": "***",
        "apiKeys": "***",
        "credentials": "***",
        "clientSecret": "***",
        "env": {"HOME": "***"},
    }
    assert masked[1]["params"]["_meta"]["auth"] == meta
    assert '"inputTokens":12' in text and '"outputTokens":34' in text
