"""A client that stops reading is cut off at its outbox bound, and the others go on (issue 22);
told why once it reads again; an idle agent is stopped and started again on next use."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from acp_bridge.host.clients import ClientLimits
from tests.host.harness import agent_argv, connect, running_host

pytestmark = pytest.mark.anyio

CHUNKS = 30_000


async def test_a_client_that_stops_reading_is_cut_off_and_the_other_gets_everything(
    tmp_path: Path,
) -> None:
    limits = ClientLimits(outbox_bytes=1024 * 1024)  # more than one read of the log
    async with running_host(tmp_path, agent_argv("echo_agent.py"), limits=limits) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="fast") as fast:
            sid = (await fast.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            deaf = await anyio.connect_unix(socket)
            async with deaf:
                for ident, method, params in (
                    (1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}}),
                    (2, "session/resume", {"sessionId": sid, "cwd": str(tmp_path)}),
                ):
                    line = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
                    await deaf.send(json.dumps(line).encode() + b"\n")
                hub = host.find(sid).hub
                with anyio.fail_after(30):
                    while len(hub.attached) < 2:
                        await hub.changed.wait()
                deaf_client = list(hub.attached.values())[1]  # attached after the fast one
                answer = await fast.request(
                    "session/prompt",
                    {"sessionId": sid, "prompt": [{"type": "text", "text": f"flood {CHUNKS}"}]},
                )
                assert answer == {"stopReason": "end_turn"}
                # the fast client got every chunk, in order
                assert fast.texts() == [f"flood-1-{i} " for i in range(CHUNKS)]
                # the deaf one was cut off at its bound (its outbox closed during the flood;
                # its connection's end, and so its detach, may come just after the answer)
                reason = deaf_client.cut_reason  # set as its outbox passed the bound
                assert reason is not None and "outbox passed" in reason, reason
                with anyio.fail_after(30):  # detached at once: asked and fed nothing more
                    while len(hub.attached) > 1:
                        await hub.changed.wait()
                assert host.client_count == 2  # connected until it was told why
                # It reads again: what its connection held already, then the reason, then the
                # connection's end.
                data = bytearray()
                with anyio.fail_after(30):
                    while True:
                        try:
                            data += await deaf.receive()
                        except anyio.EndOfStream:
                            break
                last = json.loads(bytes(data).rstrip(b"\n").rsplit(b"\n", 1)[-1])
                assert last == {
                    "jsonrpc": "2.0",
                    "method": "_acp_bridge/disconnected",
                    "params": {"reason": reason},
                }
                with anyio.fail_after(30):
                    while host.client_count > 1:
                        await host.changed.wait()


async def test_an_idle_agent_is_stopped_and_restored_on_next_use(tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    argv = agent_argv("echo_agent.py", "--history", str(history))
    async with running_host(tmp_path, argv, idle=0.2) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="editor") as editor:
            sid = (await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            first = await editor.request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "one"}]}
            )
            assert first == {"stopReason": "end_turn"}
            entry = host.find(sid)
            hub = entry.hub
            with anyio.fail_after(30):
                while hub.conversation is not None:  # stopped after 0.2 s with nothing to do
                    await hub.changed.wait()
            second = await editor.request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "two"}]}
            )
            assert second == {"stopReason": "end_turn"}
            assert editor.texts()[-1] == "two"
        events = [e.kind for e in host.store.events(sid)]
        sessions = [e.data["how"] for e in host.store.events(sid) if e.kind == "session"]
        assert sessions == ["new", "load"]  # the agent's session restored, not replaced
        assert events.count("agent_started") >= 2
