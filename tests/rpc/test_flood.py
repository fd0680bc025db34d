"""Floods of incoming requests: every one answered, the number served at once bounded.

Issue 7 (11a): the peer used to start a task for every incoming request as soon as it was read,
so 200,000 ``session/request_permission`` requests became 200,000 tasks (3.26 GB). Now at most
``max_requests_in_flight`` are served at once and the reader stops reading until one finishes.
The 200,000-request runs are in the report of that change; these tests use fewer requests and
assert the behaviour (every answer, the bound), not the speed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.rpc.peer import DEFAULT_MAX_REQUESTS_IN_FLIGHT, JsonRpcPeer
from tests.helpers import open_raw_peer

# The hang guards below (fail_after) must fire before pytest-timeout: interrupted by its
# SIGALRM inside asyncio's select, the event loop could not finish the test's tasks and the
# xdist worker hung for good (seen under load: the whole -n auto run stopped at 91%).
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(200)]  # guards: 120 + 20 s

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
FLOOD_COUNT = 10_000


async def _flood(method: str, count: int, **options: Any) -> tuple[dict[str, Any], int, int]:
    """Run the flood agent against a peer; return its tally, the most requests we served at
    once, and the bound in force."""
    command = [sys.executable, "-u", str(AGENTS / "request_flood_agent.py")]
    command += ["--count", str(count), "--method", method]
    async with await anyio.open_process(command, start_new_session=True) as process:
        assert process.stdout is not None and process.stdin is not None
        peer = JsonRpcPeer(process.stdout, process.stdin, name="flood-agent", **options)
        bound = options.get("max_requests_in_flight", DEFAULT_MAX_REQUESTS_IN_FLIGHT)
        most = 0
        tally: dict[str, Any] = {}
        done = anyio.Event()

        def watch(direction: str, line: bytes) -> None:
            nonlocal most
            most = max(most, peer.requests_in_flight)

        async def permission(params: Any) -> Any:
            nonlocal most
            most = max(most, peer.requests_in_flight)
            await anyio.lowlevel.checkpoint()  # let handlers overlap, as real ones do
            option = params["options"][1]["optionId"]
            return {"outcome": {"outcome": "selected", "optionId": option}}

        def finished(params: Any) -> None:
            tally.update(params)
            done.set()

        peer.add_observer(watch)
        peer.on_request("session/request_permission", permission)
        peer.on_notification("_flood/done", finished)
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            with anyio.fail_after(120):  # a hang guard, not a speed budget
                await done.wait()
            await peer.aclose()
        await process.stdin.aclose()
        with anyio.fail_after(20):
            await process.wait()
    return tally, most, bound


async def test_every_flooded_permission_request_is_answered_with_few_in_flight() -> None:
    tally, most, bound = await _flood("session/request_permission", FLOOD_COUNT)
    assert tally["answered"] == tally["results"] == FLOOD_COUNT
    assert (tally["errors"], tally["duplicates"], tally["unknown"]) == ({}, 0, 0)
    assert 1 <= most <= bound == DEFAULT_MAX_REQUESTS_IN_FLIGHT


async def test_every_flooded_unknown_request_gets_method_not_found_with_few_in_flight() -> None:
    tally, most, bound = await _flood("_x/flood", FLOOD_COUNT, max_requests_in_flight=8)
    assert tally["answered"] == FLOOD_COUNT
    assert tally["errors"] == {"-32601": FLOOD_COUNT}
    assert (tally["results"], tally["duplicates"], tally["unknown"]) == (0, 0, 0)
    assert 1 <= most <= bound == 8


async def test_at_the_bound_the_reader_waits_and_nothing_is_dropped() -> None:
    bound = 4
    async with open_raw_peer(max_requests_in_flight=bound) as (peer, raw):
        gate = anyio.Event()
        started = 0

        async def wait(params: Any) -> Any:
            nonlocal started
            started += 1
            await gate.wait()
            return params["n"]

        peer.on_request("wait", wait)
        count = 50
        await raw.send(
            b"".join(
                b'{"jsonrpc":"2.0","id":%d,"method":"wait","params":{"n":%d}}\n' % (n, n)
                for n in range(count)
            )
        )
        with anyio.fail_after(5):
            while started < bound:
                await anyio.lowlevel.checkpoint()
        await anyio.wait_all_tasks_blocked()
        # Everything is stuck on the gate or on the bound: no handler past it has started.
        assert (started, peer.requests_in_flight) == (bound, bound)
        gate.set()
        answers = {}
        for _ in range(count):
            with anyio.fail_after(5):
                reply = json.loads(await raw.receive_line())
            answers[reply["id"]] = reply["result"]
        assert answers == {n: n for n in range(count)}
        assert peer.requests_in_flight == 0


async def test_a_cancel_request_still_frees_a_slot_at_the_bound() -> None:
    """The bound is on handlers: ``$/cancel_request`` read before the blocked request cancels
    one of them, and the waiting request then runs."""
    async with open_raw_peer(max_requests_in_flight=1) as (peer, raw):
        started = anyio.Event()

        async def forever(params: Any) -> Any:
            started.set()
            await anyio.sleep_forever()

        async def ping(params: Any) -> Any:
            return "pong"

        peer.on_request("slow", forever)
        peer.on_request("ping", ping)
        await raw.send(b'{"jsonrpc":"2.0","id":1,"method":"slow"}\n')
        with anyio.fail_after(5):
            await started.wait()
        await raw.send(
            b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}\n'
            b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n'
        )
        replies = {}
        for _ in range(2):
            with anyio.fail_after(5):
                reply = json.loads(await raw.receive_line())
            replies[reply["id"]] = reply
        assert replies[1]["error"]["code"] == -32800
        assert replies[2]["result"] == "pong"


def test_the_bound_must_be_positive() -> None:
    from tests.helpers import memory_byte_pipe

    send, receive = memory_byte_pipe()
    try:
        with pytest.raises(ValueError, match="max_requests_in_flight"):
            JsonRpcPeer(receive, send, max_requests_in_flight=0)
    finally:
        send._stream.close()
        receive._stream.close()
