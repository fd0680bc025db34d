"""``conversation_closed`` (issue 22): a conversation closed on purpose publishes and logs it,
after its running turn's end; a shutdown alone (the owner exiting) does not; ``watch`` ends
with exit 0 on it when a client closes the conversation on the real host (``session/close``)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from acp_bridge.conversation.store import QueueStore
from tests.conversation.live import agent, session
from tests.host.cli_client import LineClient, finish, start_serve
from tests.verbs.fake_hosts import ECHO, short_dir
from tests.verbs.test_verbs_real_owners import next_event, process


@pytest.mark.anyio
async def test_close_logs_conversation_closed_after_the_turn_and_shutdown_does_not(
    tmp_path: Path,
) -> None:
    async with session(tmp_path, agent(tmp_path)) as (conv, store, events):
        await conv.send("echo working; wait 20")
        await events.wait_for("update")
        await conv.close()
        await events.wait_for("conversation_closed")
        names = [e["event"] for e in events]
        assert names.index("turn_ended") < names.index("conversation_closed")
        assert names.count("conversation_closed") == 1
        logged = [e.kind for e in store.events(conv.id, 0, 1000)]
        assert logged[-1] == "conversation_closed"
    async with session(tmp_path, agent(tmp_path)) as (conv, store, events):
        await conv.send("echo again")
        await events.wait_for("turn_ended")
    with QueueStore.open(tmp_path / "store.db") as reopened:
        logged = [e.kind for e in reopened.events(conv.id, 0, 1000)]
    assert logged.count("conversation_closed") == 1  # the second owner's exit logged none


def test_watch_exits_0_when_a_client_closes_the_conversation_on_the_host() -> None:
    with short_dir() as d:
        socket, store = d / "run" / "host.sock", d / "s.db"
        host = start_serve("--store", str(store), "--socket", str(socket), "--", *ECHO)
        try:
            client = LineClient(socket)
            client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            new = client.request("session/new", {"cwd": str(d), "mcpServers": []})
            sid = new["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "echo hi"}]}
            assert client.request("session/prompt", prompt)["result"]["stopReason"] == "end_turn"
            where = ("--store", str(store), "--socket", str(socket))
            with process("watch", sid, "--json", *where) as watch:
                assert watch.stdout is not None
                next_event(watch.stdout, "turn_ended", seq=1)  # replayed: the watch is live
                assert client.request("session/close", {"sessionId": sid})["result"] == {}
                next_event(watch.stdout, "conversation_closed")
                assert watch.wait(timeout=30) == 0
            client.close()
        finally:
            stderr = finish(host, signal.SIGTERM)
        assert host.returncode == 0, stderr
