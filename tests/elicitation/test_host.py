"""The host routes the agent's elicitations to the attached clients that advertised the mode:
the first answer wins and the others' requests are cancelled; no client able to answer means
declined; ``elicitation/complete`` goes to every attached client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.host import harness
from tests.host.harness import agent_argv, connect, running_host

pytestmark = pytest.mark.anyio

ECHO = agent_argv("echo_agent.py")


def _prompt(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


async def _initialize(client: harness.TestClient, modes: dict[str, Any]) -> None:
    capabilities = {"elicitation": modes}
    await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})


async def test_the_first_answer_wins_and_the_other_is_cancelled(tmp_path: Path) -> None:
    asked: list[str] = []
    cancelled = anyio.Event()

    async def quick(params: Any) -> Any:
        asked.append("quick")
        assert params["mode"] == "form" and params["requestedSchema"]["required"] == [
            "name",
            "color",
        ]
        return {"action": "accept", "content": {"name": "Ada", "color": "red"}}

    async def never(params: Any) -> Any:
        asked.append("never")
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async with running_host(tmp_path, ECHO) as host:
        socket = host.socket_path
        assert socket is not None
        async with (
            connect(socket, name="slow", initialize=False) as slow,
            connect(socket, name="fast", initialize=False) as fast,
        ):
            slow.peer.on_request("elicitation/create", never)
            fast.peer.on_request("elicitation/create", quick)
            await _initialize(slow, {"form": {}})
            await _initialize(fast, {"form": {}, "url": {}})
            new = await slow.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = new["sessionId"]
            await fast.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
            answer = await fast.request(
                "session/prompt", {"sessionId": sid, "prompt": _prompt("elicit form")}
            )
            assert answer == {"stopReason": "end_turn"}
            assert sorted(asked) == ["never", "quick"]
            with anyio.fail_after(10):
                await cancelled.wait()  # the loser's request was cancelled ($/cancel_request)
            assert fast.texts() == ['elicit form accept {"name":"Ada","color":"red"}']


async def test_no_client_able_to_answer_means_declined(tmp_path: Path) -> None:
    asked: list[Any] = []

    async def answer(params: Any) -> Any:
        asked.append(params)
        return {"action": "accept", "content": {"name": "x", "color": "red"}}

    async with running_host(tmp_path, ECHO) as host:
        socket = host.socket_path
        assert socket is not None
        async with (
            connect(socket, name="plain") as plain,  # advertises no elicitation at all
            connect(socket, name="forms", initialize=False) as forms,
        ):
            forms.peer.on_request("elicitation/create", answer)
            await _initialize(forms, {"form": {}, "url": None})
            sid = (await plain.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            await forms.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
            result = await plain.request(
                "session/prompt", {"sessionId": sid, "prompt": _prompt("elicit url")}
            )
            assert result == {"stopReason": "end_turn"}
            assert plain.texts() == ["elicit url decline null"]
            assert asked == []  # the form-only client is never asked a url


async def test_a_completed_url_is_told_to_every_attached_client(tmp_path: Path) -> None:
    completed: dict[str, list[Any]] = {"a": [], "b": []}
    changed = anyio.Event()

    def recorder(name: str) -> Any:
        async def on_complete(params: Any) -> None:
            completed[name].append(params)
            if all(completed.values()):
                changed.set()

        return on_complete

    async def consent(params: Any) -> Any:
        assert params["url"].startswith("https://example.com/")
        return {"action": "accept"}

    async with running_host(tmp_path, ECHO) as host:
        socket = host.socket_path
        assert socket is not None
        async with (
            connect(socket, name="a", initialize=False) as a,
            connect(socket, name="b") as b,
        ):
            a.peer.on_request("elicitation/create", consent)
            a.peer.on_notification("elicitation/complete", recorder("a"))
            b.peer.on_notification("elicitation/complete", recorder("b"))
            await _initialize(a, {"url": {}})
            sid = (await a.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            await b.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
            result = await b.request(
                "session/prompt", {"sessionId": sid, "prompt": _prompt("elicit url")}
            )
            assert result == {"stopReason": "end_turn"}
            with anyio.fail_after(10):
                await changed.wait()
            assert completed == {
                "a": [{"elicitationId": "fake-url-1"}],
                "b": [{"elicitationId": "fake-url-1"}],
            }
            assert b.texts() == ["elicit url accept null"]


async def test_the_new_updates_reach_the_clients_unchanged(tmp_path: Path) -> None:
    async with running_host(tmp_path, ECHO) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="a") as a:
            sid = (await a.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            result = await a.request(
                "session/prompt", {"sessionId": sid, "prompt": _prompt("notice; compaction")}
            )
            assert result == {"stopReason": "end_turn"}
            await a.wait_for(lambda c: len(c.updates) >= 5)
            updates = [u["update"] for u in a.updates]
            assert updates == [
                {
                    "sessionUpdate": "notice",
                    "severity": "warning",
                    "title": "Rate limited",
                    "description": "Retrying in 20 s",
                },
                {
                    "sessionUpdate": "compaction_update",
                    "compactionId": "compaction-1",
                    "status": "in_progress",
                },
                {
                    "sessionUpdate": "compaction_summary_chunk",
                    "compactionId": "compaction-1",
                    "content": {"type": "text", "text": "We fixed "},
                },
                {
                    "sessionUpdate": "compaction_summary_chunk",
                    "compactionId": "compaction-1",
                    "content": {"type": "text", "text": "the tests."},
                },
                {
                    "sessionUpdate": "compaction_update",
                    "compactionId": "compaction-1",
                    "status": "completed",
                },
            ]
