"""acp_bridge.host.client against the real host core (host/serve.py's Host, in the test's event
loop, on a real Unix socket, running the echo agent): send, watch, status and cancel over the
wire the server speaks (issue 22)."""

from __future__ import annotations

import time

import anyio
import pytest

from acp_bridge.host.client import Endpoint, HostRequestError, connect_host, text_content
from tests.host.harness import agent_argv, running_host
from tests.verbs.fake_hosts import ROOT, short_dir

pytestmark = pytest.mark.anyio

ECHO = agent_argv("echo_agent.py")


async def test_a_message_sent_through_the_host_is_watched_to_the_end_of_its_turn() -> None:
    with short_dir() as d:
        async with running_host(d, ECHO) as host:
            record = host.store.create_conversation(
                agent={"argv": ECHO}, cwd=str(ROOT), config={}, now=time.time()
            )
            assert host.socket_path is not None
            endpoint = Endpoint(socket=host.socket_path)
            async with connect_host(endpoint, store=host.store_path) as client:
                assert client.info is not None and client.info.pid is not None
                async with client.watch(record.id) as events:
                    seq = await client.send(record.id, text_content("echo through the host"))
                    text = []
                    with anyio.fail_after(30):
                        async for item in events:
                            event = item.event
                            if event["event"] == "update" and event.get("seq") == seq:
                                content = event["update"].get("content") or {}
                                text.append(content.get("text", ""))
                            if event["event"] == "turn_ended" and event["seq"] == seq:
                                break
                    assert "".join(text).strip() == "through the host"  # the echo program
                    assert event["state"] == "done"
                rows = await client.status(record.id)
                assert rows[0]["conversationId"] == record.id
                assert rows[0]["queueDepth"] == 0
                assert await client.cancel(record.id) == (False, None)


async def test_an_unknown_conversation_is_a_usage_refusal_by_the_host() -> None:
    with short_dir() as d:
        async with running_host(d, ECHO) as host:
            assert host.socket_path is not None
            endpoint = Endpoint(socket=host.socket_path)
            async with connect_host(endpoint, store=host.store_path) as client:
                with pytest.raises(HostRequestError) as caught:
                    await client.send("no-such-conversation", text_content("x"))
                assert caught.value.is_usage


async def test_a_watch_replays_a_history_longer_than_its_buffer_and_then_goes_live() -> None:
    """The host sends the stored events before it answers _acp_bridge/watch: a replay longer than
    the client's buffer (256) once filled it, and the answer behind it was never read (watch
    exited 3 after its timeout on any conversation with more than 256 logged events)."""
    with short_dir() as d:
        async with running_host(d, ECHO) as host:
            record = host.store.create_conversation(
                agent={"argv": ECHO}, cwd=str(ROOT), config={}, now=time.time()
            )
            assert host.socket_path is not None
            endpoint = Endpoint(socket=host.socket_path)
            async with connect_host(endpoint, store=host.store_path) as client:
                words = " ".join(f"w{i}" for i in range(600))  # one chunk a word: 600 updates
                first = await client.send(record.id, text_content(words))
                async with client.watch(record.id) as events:
                    with anyio.fail_after(60):
                        async for item in events:
                            if item.event["event"] == "turn_ended":
                                break
                assert item.event["seq"] == first
                async with client.watch(record.id, from_cursor=item.cursor) as events:
                    second = await client.send(record.id, text_content("echo live"))
                    with anyio.fail_after(60):
                        async for item in events:
                            if item.event["event"] == "turn_ended":
                                break
                    assert item.event["seq"] == second
