"""acp_bridge.host.client against a real (fake) host process: the calls, and each way a host
can fail them (issue 22)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acp_bridge.host.client import (
    Endpoint,
    HostFailedError,
    HostRequestError,
    HostUnusableError,
    NoHostError,
    candidate_endpoints,
    connect_host,
    text_content,
)
from acp_bridge.host.owner import OwnerInfo
from tests.verbs.fake_hosts import fake_host, short_dir

pytestmark = pytest.mark.anyio

STORE = Path("/tmp/acpv-store/store.db")


async def test_the_calls_reach_the_host_and_come_back_typed() -> None:
    with short_dir() as d, fake_host(d, "--first-seq", "7", store=STORE) as host:
        async with connect_host(Endpoint(socket=host.socket), store=STORE) as client:
            assert client.info is not None and client.info.store == str(STORE)
            rows = await client.status()
            assert [r["conversationId"] for r in rows] == ["c-fake"]
            assert await client.send("c-fake", text_content("hi"), steer=True, label="t") == 7
            assert await client.cancel("c-fake") == (True, 3)
        sent = [m for m in host.received() if m.get("method") == "_acp_bridge/send"]
        assert sent[0]["params"] == {
            "conversationId": "c-fake",
            "content": [{"type": "text", "text": "hi"}],
            "steer": True,
            "label": "t",
        }
        assert host.methods()[:2] == ["initialize", "_acp_bridge/hello"]


async def test_a_watch_replays_after_the_cursor_then_ends_with_the_connection() -> None:
    seen = []
    with short_dir() as d, fake_host(d, "--close-watch", store=STORE) as host:
        endpoint = Endpoint(socket=host.socket)
        async with (
            connect_host(endpoint, store=STORE) as client,
            client.watch("c-fake", from_cursor=2) as events,
        ):
            async for item in events:
                seen.append((item.cursor, item.event["event"]))
                if item.event["event"] == "conversation_closed":
                    break
        assert seen == [
            (3, "turn_started"),
            (4, "update"),
            (5, "update"),
            (6, "turn_ended"),
            (7, "conversation_closed"),
        ]


async def test_no_socket_is_no_host() -> None:
    with short_dir() as d, pytest.raises(NoHostError, match="no host is listening on"):
        async with connect_host(Endpoint(socket=d / "none.sock")):
            pass


async def test_a_host_of_another_store_is_refused_naming_both_stores() -> None:
    refused = pytest.raises(HostUnusableError, match=r"serves the store /elsewhere/other\.db, not")
    with short_dir() as d, fake_host(d, store=Path("/elsewhere/other.db")) as host, refused:
        async with connect_host(Endpoint(socket=host.socket), store=STORE):
            pass


async def test_a_host_that_closes_mid_answer_fails_the_call() -> None:
    with short_dir() as d, fake_host(d, "--fail", "_acp_bridge/send:close", store=STORE) as host:
        async with connect_host(Endpoint(socket=host.socket), store=STORE) as client:
            with pytest.raises(HostFailedError, match="closed the connection before answering"):
                await client.send("c-fake", text_content("hi"))


async def test_a_host_that_answers_garbage_fails_the_call_and_says_so() -> None:
    with short_dir() as d, fake_host(d, "--fail", "_acp_bridge/cancel:garbage", store=STORE) as h:
        endpoint = Endpoint(socket=h.socket)
        async with connect_host(endpoint, store=STORE, request_timeout_s=0.5) as client:
            with pytest.raises(HostFailedError, match="not JSON-RPC: b'this is not JSON"):
                await client.cancel("c-fake")


async def test_a_host_that_never_answers_the_greeting_fails_within_the_connect_timeout() -> None:
    failed = pytest.raises(HostFailedError, match=r"did not answer in 0.3 s \(initialize\)")
    with short_dir() as d, fake_host(d, "--fail", "initialize:silent", store=STORE) as h, failed:
        async with connect_host(Endpoint(socket=h.socket), connect_timeout_s=0.3):
            pass


async def test_a_refusal_by_the_host_is_a_request_error() -> None:
    with short_dir() as d, fake_host(d, "--fail", "_acp_bridge/status:error", store=STORE) as h:
        async with connect_host(Endpoint(socket=h.socket), store=STORE) as client:
            with pytest.raises(HostRequestError, match="refused _acp_bridge/status") as caught:
                await client.status()
            assert not caught.value.is_usage


async def test_a_socket_of_no_permission_is_unusable() -> None:
    if os.geteuid() == 0:
        pytest.skip("root connects to any socket")
    with short_dir() as d, fake_host(d, store=STORE) as host:
        host.socket.chmod(0)
        with pytest.raises(HostUnusableError, match="permission denied"):
            async with connect_host(Endpoint(socket=host.socket)):
                pass


def test_a_live_owner_socket_goes_before_the_host_socket() -> None:
    host = Path("/run/h.sock")
    live = OwnerInfo(1, Path("/run/c.sock"))
    assert candidate_endpoints(live, host) == [
        Endpoint(socket=Path("/run/c.sock")),
        Endpoint(socket=host),
    ]
    assert candidate_endpoints(OwnerInfo(1, None), host) == [Endpoint(socket=host)]
    assert candidate_endpoints(None, host) == [Endpoint(socket=host)]
