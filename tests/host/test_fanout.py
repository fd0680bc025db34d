"""The host's fan-out of a batch of log entries (host/conversations.py ``_deliver``): each
client's share of a batch is put in its outbox as one piece, and still every client gets every
line it should, once, in log order; the sender of a prompt is not shown it again, and a client
that is attached AND watching gets each entry's update and event side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.host.harness import agent_argv, connect, running_host

pytestmark = pytest.mark.anyio

CHUNKS = 3000


def _chunks(client: Any) -> list[str]:
    return [t for t in client.texts() if t.startswith("flood-")]


async def test_a_flood_reaches_every_client_in_order_and_both_kinds_interleave(
    tmp_path: Path,
) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with (
            connect(socket, name="sender") as sender,
            connect(socket, name="reader") as reader,
            connect(socket, name="both") as both,
        ):
            new = await sender.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = new["sessionId"]
            load = {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            await reader.request("session/resume", load)
            await both.request("session/resume", load)
            await both.request("_acp_bridge/watch", {"conversationId": sid})
            frames: list[dict[str, Any]] = []

            def observe(direction: str, line: bytes) -> None:
                if direction == "in":
                    message = json.loads(line)
                    if "method" in message:
                        frames.append(message)

            both.peer.add_observer(observe)
            prompt = [{"type": "text", "text": f"flood {CHUNKS}"}]
            answer = await sender.request("session/prompt", {"sessionId": sid, "prompt": prompt})
            assert answer == {"stopReason": "end_turn"}
            expected = [f"flood-1-{i} " for i in range(CHUNKS)]
            for client in (reader, both):
                await client.wait_for(lambda c: len(_chunks(c)) >= CHUNKS)
            await both.wait_for(
                lambda c: any(e["event"]["event"] == "turn_ended" for e in c.events)
            )
            assert _chunks(sender) == expected
            assert _chunks(reader) == expected
            assert _chunks(both) == expected
            # The sender is not shown its own prompt; the others are, once.
            assert sender.texts("user_message_chunk") == []
            assert reader.texts("user_message_chunk") == [f"flood {CHUNKS}"]
            assert both.texts("user_message_chunk") == [f"flood {CHUNKS}"]
            # Attached and watching: each update entry's session/update, then its event.
            updates = [i for i, f in enumerate(frames) if f["method"] == "session/update"]
            assert len(updates) == CHUNKS + 1
            for i in updates:
                following = frames[i + 1]
                assert following["method"] == "_acp_bridge/event"
                event = following["params"]["event"]
                if event["event"] == "update":
                    assert event["update"] == frames[i]["params"]["update"]
                else:
                    assert event["event"] == "turn_started"


async def test_every_client_is_fed_the_committed_log_once_in_order_across_turns(
    tmp_path: Path,
) -> None:
    """The live tail takes most entries from the group commit, in memory, and reads the store
    for the rest (a turn's start and end): a watcher from cursor 0 still sees exactly the
    store's log, each entry once, in order, and an attached client every update of it."""
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with (
            connect(socket, name="one") as one,
            connect(socket, name="two") as two,
            connect(socket, name="watcher") as watcher,
        ):
            new = await one.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = new["sessionId"]
            load = {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            await two.request("session/resume", load)
            await watcher.request("session/resume", load)
            await watcher.request("_acp_bridge/watch", {"conversationId": sid})

            async def prompt(client: Any, text: str) -> None:
                params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
                assert await client.request("session/prompt", params) == {"stopReason": "end_turn"}

            async with anyio.create_task_group() as tg:  # two turns queued, FIFO
                tg.start_soon(prompt, one, "flood 700")
                await one.wait_for(lambda c: len(_chunks(c)) > 0)
                tg.start_soon(prompt, two, "flood 300")
            await prompt(one, "echo last")
            stored = host.store.events(sid)
            await watcher.wait_for(
                lambda c: bool(c.events) and c.events[-1]["cursor"] >= stored[-1].id
            )
            seen = [(e["cursor"], e["event"]["event"]) for e in watcher.events]
            assert seen == [(e.id, e.kind) for e in stored]
            for event, entry in zip(watcher.events, stored, strict=True):
                assert {k: v for k, v in event["event"].items() if k not in ("event", "ts")} == (
                    entry.data
                )
            updates = [e.data["update"] for e in stored if e.kind == "update"]
            assert [u["update"] for u in watcher.updates if "_meta" not in u["update"]] == updates
            assert len(_chunks(two)) == 1000
