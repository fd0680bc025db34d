"""The proxy as a transparent relay: the real ``acp-bridge proxy`` process between a raw NDJSON
editor and fixture agents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from tests.proxy.harness import ENV, agent, chunk_text, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_turn_passes_through_and_eof_exits_0() -> None:
    async with open_editor(proxy(agent_argv=agent("echo_agent.py"))) as editor:
        session_id = await editor.handshake()
        seen: list[dict[str, object]] = []
        answer = await editor.response(
            await editor.request("session/prompt", prompt_params(session_id, "hello world")), seen
        )
        assert answer["result"] == {"stopReason": "end_turn"}
        assert "".join(t for m in seen if (t := chunk_text(m))) == "hello world"
        assert await editor.close_and_wait() == 0


async def _ext_session(argv: list[str]) -> list[bytes]:
    """One scripted session against the extension agent; every line the editor read."""
    async with open_editor(argv) as editor:
        await editor.send_raw(
            b'{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1,'
            b' "clientCapabilities": {"fs": {"readTextFile": false}, "futureCap": {"y": 1.0}},'
            b' "_meta": {"editor.example": "caf\\u00e9"}, "unknownParam": [1e2]}}'
        )
        await editor.response(0)
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": [], "zz": 1})
        session_id = new["result"]["sessionId"]
        await editor.send_raw(
            b'{"jsonrpc":"2.0","id":"h1","method":"_ext.example/hello","params":{"a":1.0,'
            b'"_meta":{"m":[]}}}'
        )
        assert (await editor.response("h1"))["result"]["got"]["a"] == 1.0
        await editor.send_raw(b'{"jsonrpc":"2.0","method":"_ext.example/note","params":{"n":2}}')
        await editor.send_raw(b'{"jsonrpc":"2.0","id":"u1","method":"_unknown/thing"}')
        assert (await editor.response("u1"))["error"]["code"] == -32601
        await editor.send_raw(
            b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":77}}'
        )
        prompt = await editor.request("session/prompt", prompt_params(session_id, "go"))
        ask = await editor.until(lambda m: m.get("method") == "_ext.example/ask")
        # Direct, the agent's own id; through the proxy, the proxy's (ids that never cross).
        assert ask["id"] in ("ext-ask-1", "acp-bridge/agent-1")
        await editor.send_raw(
            b'{"jsonrpc":"2.0","id":%s,"result":{"ok": true,"_meta":{"e":1.0}}}'
            % json.dumps(ask["id"]).encode()
        )
        answer = await editor.response(prompt)
        assert answer["result"]["extra"] == 1.5
        assert await editor.close_and_wait() == 0
        return editor.lines


async def test_extension_traffic_is_byte_equal_to_a_direct_session(tmp_path: Path) -> None:
    direct_log, proxied_log = tmp_path / "direct.log", tmp_path / "proxied.log"
    direct = await _ext_session(agent("ext_agent.py", "--received", str(direct_log)))
    proxied = await _ext_session(
        proxy(agent_argv=agent("ext_agent.py", "--received", str(proxied_log)))
    )
    # What the editor read, frame by frame, and what the agent read: the same bytes, but for
    # the id of the agent's request, which the proxy owns toward the editor.
    own_id = b'"id":"acp-bridge/agent-1"'
    assert [line.replace(own_id, b'"id":"ext-ask-1"') for line in proxied] == direct
    assert sum(own_id in line for line in proxied) == 1
    assert proxied_log.read_bytes() == direct_log.read_bytes()
    assert b'"n": 1.0, "big": 1e2, "name": "caf\\u00e9"' in b"\n".join(proxied)
    assert b'"unknownParam": [1e2]' in proxied_log.read_bytes()


_GENERATED = re.compile(rb'"(messageId|toolCallId|updatedAt)":"[^"]*"')


def _normalised(lines: list[bytes], session_id: str, pid: int) -> list[bytes]:
    """The lines with what the agent generates per run (ids, pid, times) blanked."""
    return [
        _GENERATED.sub(rb'"\1":"X"', line)
        .replace(session_id.encode(), b"SESSION")
        .replace(b'"pid":%d' % pid, b'"pid":PID')
        for line in lines
    ]


async def _echo_session(argv: list[str]) -> list[bytes]:
    async with open_editor(argv) as editor:
        init = await editor.call(
            "initialize", {"protocolVersion": 1, "_meta": {"x": 1}, "clientCapabilities": {}}
        )
        pid = init["result"]["_meta"]["fakeAcp"]["pid"]
        new = await editor.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        session_id = new["result"]["sessionId"]
        for text in ("hello there world", "thought hmm; plan; tool; usage 5 100 0.5; echo done"):
            await editor.call("session/prompt", prompt_params(session_id, text))
        await editor.call("session/list", {})
        assert await editor.close_and_wait() == 0
        return _normalised(editor.lines, session_id, pid)


async def test_a_fixture_session_is_the_same_direct_and_proxied_ids_aside() -> None:
    direct = await _echo_session(agent("echo_agent.py", "--quiet"))
    proxied = await _echo_session(proxy(agent_argv=agent("echo_agent.py", "--quiet")))
    assert len(proxied) > 10
    assert proxied == direct


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_an_agent_that_cannot_start_is_one_line_and_exit_3() -> None:
    argv = proxy(agent_argv=["/nonexistent/agent-command"])
    result = await anyio.run_process(argv, check=False, env=ENV, input=b"")
    assert result.returncode == 3 and result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        "acp-bridge proxy: could not start agent-command (/nonexistent/agent-command): "
        "No such file or directory"
    ]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_non_json_lines_of_the_agent_never_reach_the_editor() -> None:
    # The noisy agent prints a banner and a non-JSON line before every message; the editor's
    # reader parses every line it gets, so one of them reaching it would fail the test.
    async with open_editor(proxy(agent_argv=agent("noisy_agent.py", "--quiet"))) as editor:
        session_id = await editor.handshake()
        answer = await editor.call("session/prompt", prompt_params(session_id, "still fine"))
        assert answer["result"] == {"stopReason": "end_turn"}
        assert await editor.close_and_wait() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_requests_past_the_in_flight_bound_are_answered_at_once() -> None:
    """--max-in-flight 2: two requests the agent never answers fill the bound; the third is
    answered at once with an error that names the bound, and the proxy stays healthy."""
    hanging = agent("echo_agent.py", "--quiet", "--hang-on", "session/list")
    async with open_editor(proxy("--max-in-flight", "2", agent_argv=hanging)) as editor:
        session_id = await editor.handshake()
        for _ in range(2):
            await editor.request("session/list", {})
        refused = await editor.call("session/list", {})
        assert refused["error"]["code"] == -32603
        assert "--max-in-flight" in refused["error"]["message"]
        prompt = await editor.call("session/prompt", prompt_params(session_id, "refused too"))
        assert "--max-in-flight" in prompt["error"]["message"]  # every request counts
        assert await editor.close_and_wait() == 0
