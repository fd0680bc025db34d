"""What the reference agent refuses or keeps to itself (issue 21, items 11-14), driven over raw
ACP by a real client against the agent process on a scripted mock model.

- ``list_dir`` stays inside the session's roots (cwd + additionalDirectories, symlinks resolved)
  and asks permission as any command does;
- a new file is not read before it is written (the client never answers an error for it);
- content the agent did not advertise in ``promptCapabilities`` is refused -32602 before the
  model or the history sees it;
- one prompt holds at most ``MAX_PROMPT_BYTES`` of text and resource content; past it -32602
  names the limit, and the agent's memory stays bounded.

Pinned to asyncio, as the other agent tests: one litellm import per agent process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.agents.prompt import MAX_PROMPT_BYTES
from acp_bridge.errors import RpcError
from tests.agents.agent_client import (
    RawClient,
    agent_argv,
    agent_env,
    open_agent_client,
    requires_litellm,
)

pytestmark = [
    requires_litellm,
    pytest.mark.anyio,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
    # Each process imports litellm (seconds, several times that on a loaded machine): the
    # suite's 60 s is no safety net for a walk of several agent processes.
    pytest.mark.timeout(180),
]


def _tool_turn(when: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "when": when,
        "calls": [{"tools": [{"name": name, "arguments": arguments}]}, {"say": "Done."}],
    }


def _argv(tmp_path: Path, extra: Path) -> list[str]:
    script = tmp_path / "guards.json"
    replies = [
        _tool_turn("list here", "list_dir", {"path": "."}),
        _tool_turn("list root", "list_dir", {"path": "/root"}),
        _tool_turn("list parent", "list_dir", {"path": "../outside"}),
        _tool_turn("list link", "list_dir", {"path": "escape"}),
        _tool_turn("list extra", "list_dir", {"path": str(extra)}),
        _tool_turn("write new", "write_file", {"path": "new.txt", "content": "fresh\n"}),
        _tool_turn("write old", "write_file", {"path": "old.txt", "content": "changed\n"}),
    ]
    script.write_text(json.dumps({"replies": replies, "default": {"say": "You said: {prompt}"}}))
    argv = agent_argv(tmp_path / "history.db")
    argv[argv.index("--mock-script") + 1] = str(script)
    return argv


def _tool_updates(client: RawClient, start: int) -> list[dict[str, Any]]:
    return [u for u in client.updates[start:] if u["sessionUpdate"].startswith("tool_call")]


def _failure(client: RawClient, start: int) -> str:
    last = _tool_updates(client, start)[-1]
    assert last["status"] == "failed", last
    return str(last["content"][0]["content"]["text"])


async def test_list_dir_stays_in_the_roots_and_asks_and_a_new_file_is_not_read(
    tmp_path: Path,
) -> None:
    work, extra, outside = tmp_path / "project", tmp_path / "extra", tmp_path / "outside"
    for directory in (work, extra, outside):
        directory.mkdir()
    (work / "inside.txt").write_text("")
    (extra / "extra.txt").write_text("")
    (outside / "secret.txt").write_text("")
    (work / "escape").symlink_to(outside)
    async with open_agent_client(_argv(tmp_path, extra)) as client:
        init = await client.initialize()
        assert init["agentCapabilities"]["sessionCapabilities"]["additionalDirectories"] == {}
        with pytest.raises(RpcError) as relative:
            await client.call(
                "session/new",
                {"cwd": str(work), "mcpServers": [], "additionalDirectories": ["extra"]},
            )
        assert relative.value.code == -32602
        new = await client.call(
            "session/new",
            {"cwd": str(work), "mcpServers": [], "additionalDirectories": [str(extra)]},
        )
        sid = new["sessionId"]

        # Denied (as under --permission deny): asked first, nothing listed, no terminal.
        client.permission_answer = lambda _: "reject"
        start = len(client.updates)
        assert (await client.prompt(sid, "list here"))["stopReason"] == "end_turn"
        assert len(client.permissions) == 1
        assert client.permissions[0]["toolCall"]["kind"] == "search"
        assert "Rejected" in _failure(client, start)
        assert client.requests_received("terminal/create") == []

        # Allowed: listed in the client's terminal.
        client.permission_answer = lambda _: "allow"
        start = len(client.updates)
        await client.prompt(sid, "list here")
        assert _tool_updates(client, start)[-1]["status"] == "completed"
        assert len(client.requests_received("terminal/create")) == 1
        start = len(client.updates)
        await client.prompt(sid, "list extra")  # an additional directory is a root too
        assert _tool_updates(client, start)[-1]["status"] == "completed"
        assert client.requests_received("terminal/create")[-1]["args"][-1] == str(extra)

        # Outside the roots (absolute, through .., through a symlink): refused before any
        # question or command.
        asked = len(client.permissions)
        for prompt in ("list root", "list parent", "list link"):
            start = len(client.updates)
            await client.prompt(sid, prompt)
            assert "outside the session's directories" in _failure(client, start), prompt
        assert len(client.permissions) == asked
        assert len(client.requests_received("terminal/create")) == 2

        # A new file is written without being read first; an existing one is read for the diff.
        start = len(client.updates)
        assert (await client.prompt(sid, "write new"))["stopReason"] == "end_turn"
        assert (work / "new.txt").read_text() == "fresh\n"
        assert client.requests_received("fs/read_text_file") == []
        assert client.errors_answered == []
        assert client.permissions[-1]["toolCall"]["content"][0]["oldText"] is None
        (work / "old.txt").write_text("before\n")
        await client.prompt(sid, "write old")
        assert [r["path"] for r in client.requests_received("fs/read_text_file")] == [
            str(work / "old.txt")
        ]
        assert client.permissions[-1]["toolCall"]["content"][0]["oldText"] == "before\n"
        assert client.errors_answered == []


def _vm_high_water_mark_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc")


async def test_a_prompt_is_refused_for_content_not_advertised_or_past_the_size_bound(
    tmp_path: Path,
) -> None:
    work = tmp_path / "project"
    work.mkdir()
    async with open_agent_client(_argv(tmp_path, work)) as client:
        init = await client.initialize()
        accepted = init["agentCapabilities"]["promptCapabilities"]
        assert accepted == {"image": False, "audio": False, "embeddedContext": True}
        sid = (await client.call("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"]
        # A first turn waits for litellm's import, so it does not count as the 30 MB's growth.
        assert (await client.prompt(sid, "hello"))["stopReason"] == "end_turn"

        async def refused(*blocks: dict[str, Any]) -> RpcError:
            start = len(client.updates)
            with pytest.raises(RpcError) as error:
                await client.call("session/prompt", {"sessionId": sid, "prompt": list(blocks)})
            assert client.updates[start:] == []  # nothing streamed, no usage: never billed
            return error.value

        text = {"type": "text", "text": "look at this"}
        unknown = await refused(text, {"type": "video", "data": "AAAA"})
        assert unknown.code == -32602 and "'video'" in unknown.message
        image = await refused(text, {"type": "image", "data": "AAAA", "mimeType": "image/png"})
        assert image.code == -32602 and "'image'" in image.message
        audio = await refused({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"})
        assert audio.code == -32602

        # Bytes, not characters: this text is one byte over the bound in UTF-8.
        wide = "é" * (MAX_PROMPT_BYTES // 2) + "x"
        too_long = await refused({"type": "text", "text": wide})
        assert too_long.code == -32602 and str(MAX_PROMPT_BYTES) in too_long.message
        assert too_long.data["maxPromptBytes"] == MAX_PROMPT_BYTES
        half = "x" * (MAX_PROMPT_BYTES // 2 + 1)
        embedded = {"type": "resource", "resource": {"uri": "file:///a", "text": half}}
        assert (await refused(text | {"text": half}, embedded)).code == -32602
        blob = {"type": "resource", "resource": {"uri": "file:///b", "blob": half + half}}
        assert (await refused(blob)).code == -32602

        # 30 MB: refused, and the agent's memory never held many copies of it.
        before = _vm_high_water_mark_kib(client.process.pid)
        huge = await refused({"type": "text", "text": "y" * 30_000_000})
        assert huge.code == -32602
        grown_mib = (_vm_high_water_mark_kib(client.process.pid) - before) / 1024
        assert grown_mib < 200, grown_mib  # it was 660 MiB when the prompt went to the model

        # Nothing refused reached the history; the session goes on.
        start = len(client.updates)
        answer = await client.prompt(sid, "still there")
        assert answer["stopReason"] == "end_turn" and client.text(start) == "You said: still there"
        await client.call("session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        replayed = [u for u in client.updates if u["sessionUpdate"] == "user_message_chunk"]
        assert [u["content"]["text"] for u in replayed] == ["hello", "still there"]


async def test_list_dir_under_the_bridge_run_with_permission_deny_lists_nothing(
    tmp_path: Path,
) -> None:
    """The reproduction: ``acp-bridge run --permission deny --allow-terminal`` on the agent.
    The listing of the project is asked and denied; /root is refused without asking; no
    terminal is ever shown, nothing is listed."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "inside.txt").write_text("")
    agent = _argv(tmp_path, work)
    argv = [
        *agent[:2],
        "acp_bridge",
        "run",
        "--json",
        "--store",
        str(tmp_path / "store.db"),
        "--cwd",
        str(work),
        "--permission",
        "deny",
        "--allow-terminal",
        "-m",
        "list here",
        "-m",
        "list root",
        "--",
        *agent,
    ]
    with anyio.fail_after(120):
        result = await anyio.run_process(argv, env=agent_env(), check=False)
    assert result.returncode == 0, result.stderr.decode()
    events = [json.loads(line) for line in result.stdout.splitlines()]
    decisions = [
        (e["toolCall"]["title"], e["decision"]) for e in events if e["event"] == "permission"
    ]
    assert decisions == [("List .", "reject_once")]
    failed = [
        e["update"]["content"][0]["content"]["text"]
        for e in events
        if e["event"] == "update" and e["update"].get("status") == "failed"
    ]
    assert failed[0] == "Rejected by the user."
    assert "'/root' is outside the session's directories" in failed[1]
    assert [e["stopReason"] for e in events if e["event"] == "turn_ended"] == ["end_turn"] * 2
    terminals = [e for e in events if e["event"] == "update" and '"terminal"' in json.dumps(e)]
    assert terminals == [] and b"inside.txt" not in result.stdout
