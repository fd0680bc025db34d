"""Incoming requests are served by reused workers, each request in its own cancel scope.

The peer used to start a task per incoming request (anyio's task start was most of what a small
request cost). Workers now stay and take the next request; these tests pin what must not change
with that: per-request cancel, a worker surviving its request's cancel or crash, the bound on
idle workers, nothing left counted in flight when the connection ends, and error answers that
are the same on a method's first call (through jsonrpcserver) and later ones (framed directly).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pydantic
import pytest
from anyio.abc import ByteReceiveStream

from acp_bridge.errors import RpcError
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.rpc.serving import IDLE_WORKERS_KEPT
from tests.helpers import RawEnd, memory_byte_pipe, open_peer_pair, open_raw_peer

pytestmark = pytest.mark.anyio


async def _read_json(raw: RawEnd) -> Any:
    with anyio.fail_after(5):
        return json.loads(await raw.receive_line())


async def _echo(params: Any) -> Any:
    return params


async def test_requests_one_after_another_reuse_one_worker() -> None:
    async with open_peer_pair() as (a, b):
        b.on_request("echo", _echo)
        for n in range(20):
            assert await a.request("echo", {"n": n}) == {"n": n}
            with anyio.fail_after(5):
                while b.idle_workers != 1:  # the worker parks once it has answered
                    await anyio.lowlevel.checkpoint()
        assert b.requests_in_flight == 0


async def test_a_cancel_request_cancels_only_its_handler_in_a_reused_worker() -> None:
    async with open_raw_peer() as (peer, raw):
        started = anyio.Event()

        async def forever(params: Any) -> Any:
            started.set()
            await anyio.sleep_forever()

        peer.on_request("slow", forever)
        peer.on_request("echo", _echo)
        await raw.send(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}\n')
        assert (await _read_json(raw))["result"] == [1]
        with anyio.fail_after(5):
            while peer.idle_workers != 1:
                await anyio.lowlevel.checkpoint()
        await raw.send(b'{"jsonrpc":"2.0","id":2,"method":"slow"}\n')
        with anyio.fail_after(5):
            await started.wait()
        assert peer.idle_workers == 0  # the parked worker took it: no new task
        await raw.send(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":2}}\n')
        reply = await _read_json(raw)
        assert reply["id"] == 2 and reply["error"]["code"] == -32800
        # The same worker serves on, and the next request is not cancelled by the last one's
        # scope.
        await raw.send(b'{"jsonrpc":"2.0","id":3,"method":"echo","params":[3]}\n')
        assert await _read_json(raw) == {"jsonrpc": "2.0", "result": [3], "id": 3}
        with anyio.fail_after(5):
            while peer.idle_workers != 1:
                await anyio.lowlevel.checkpoint()
        assert peer.requests_in_flight == 0


async def test_a_cancel_request_for_a_finished_request_does_not_touch_the_next_one() -> None:
    async with open_raw_peer() as (peer, raw):
        release = anyio.Event()

        async def gated(params: Any) -> Any:
            await release.wait()
            return "done"

        peer.on_request("echo", _echo)
        peer.on_request("gated", gated)
        await raw.send(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}\n')
        await _read_json(raw)
        await raw.send(b'{"jsonrpc":"2.0","id":2,"method":"gated"}\n')
        await raw.send(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}\n')
        await raw.send(b'{"jsonrpc":"2.0","id":3,"method":"echo","params":[3]}\n')
        assert await _read_json(raw) == {"jsonrpc": "2.0", "result": [3], "id": 3}
        release.set()
        assert await _read_json(raw) == {"jsonrpc": "2.0", "result": "done", "id": 2}


async def test_idle_workers_after_a_burst_are_bounded() -> None:
    burst = IDLE_WORKERS_KEPT + 40
    async with open_peer_pair() as (a, b):
        release = anyio.Event()
        entered = 0

        async def gated(params: Any) -> Any:
            nonlocal entered
            entered += 1
            await release.wait()
            return params

        b.on_request("gated", gated)
        results: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def call(n: int) -> None:
                results.append((await a.request("gated", [n]))[0])

            for n in range(burst):
                tg.start_soon(call, n)
            with anyio.fail_after(10):
                while entered < burst:
                    await anyio.lowlevel.checkpoint()
            assert b.requests_in_flight == burst
            release.set()
        assert sorted(results) == list(range(burst))
        with anyio.fail_after(5):
            while b.requests_in_flight:
                await anyio.lowlevel.checkpoint()
        assert b.idle_workers == IDLE_WORKERS_KEPT


async def test_a_crashing_handler_leaves_its_worker_serving() -> None:
    async with open_raw_peer() as (peer, raw):

        async def crash(params: Any) -> Any:
            raise KeyError("secret")

        peer.on_request("crash", crash)
        peer.on_request("echo", _echo)
        for n in range(3):
            await raw.send(b'{"jsonrpc":"2.0","id":%d,"method":"crash"}\n' % n)
            assert (await _read_json(raw))["error"]["code"] == -32603
            await raw.send(b'{"jsonrpc":"2.0","id":"e%d","method":"echo","params":[0]}\n' % n)
            assert (await _read_json(raw))["result"] == [0]
        assert peer.idle_workers == 1


class _Params(pydantic.BaseModel):
    n: int


@pytest.mark.parametrize(
    "raising",
    [
        RpcError(-32001, "nope"),
        RpcError(-32002, "nope", {"why": "because"}),
        KeyError("secret"),
    ],
    ids=["rpc-error", "rpc-error-with-data", "crash"],
)
async def test_a_methods_answers_are_the_same_on_its_first_call_and_later_ones(
    raising: Exception,
) -> None:
    async with open_raw_peer() as (peer, raw):

        async def handler(params: Any) -> Any:
            if params == ["fail"]:
                raise raising
            if params == ["invalid"]:
                _Params.model_validate({"n": "x"})
            return {"ok": params}

        peer.on_request("m", handler)
        answers: list[bytes] = []
        for _ in range(3):  # the first call is jsonrpcserver's lookup, later ones are direct
            for params in (b'["fail"]', b'["invalid"]', b'{"fine":1}', b"null"):
                await raw.send(b'{"jsonrpc":"2.0","id":9,"method":"m","params":%s}\n' % params)
                with anyio.fail_after(5):
                    answers.append(await raw.receive_line())
        assert answers[0:4] == answers[4:8] == answers[8:12]
        first = [json.loads(line) for line in answers[0:4]]
        assert first[0]["error"]["code"] == (
            raising.code if isinstance(raising, RpcError) else -32603
        )
        assert first[1]["error"]["code"] == -32602
        assert first[2] == {"jsonrpc": "2.0", "result": {"ok": {"fine": 1}}, "id": 9}
        assert first[3] == {"jsonrpc": "2.0", "result": {"ok": None}, "id": 9}


class _ScriptedInput(ByteReceiveStream):
    """Hands out chunks; each waits for its gate, and the end follows the last chunk with no
    scheduler pass in between (a pipe that had both in its buffer)."""

    def __init__(self, chunks: list[tuple[anyio.Event, bytes]]) -> None:
        self._chunks = chunks

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            raise anyio.EndOfStream
        gate, chunk = self._chunks.pop(0)
        await gate.wait()
        return chunk

    async def aclose(self) -> None:
        pass


async def test_a_request_read_with_the_end_of_the_stream_leaves_nothing_in_flight() -> None:
    first, second = anyio.Event(), anyio.Event()
    first.set()
    script = _ScriptedInput(
        [
            (first, b'{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}\n'),
            (second, b'{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]}\n'),
        ]
    )
    out_send, out_receive = memory_byte_pipe()
    peer = JsonRpcPeer(script, out_send, name="peer")
    peer.on_request("echo", _echo)
    async with anyio.create_task_group() as tg:
        await tg.start(peer.run)
        with anyio.fail_after(5):
            while peer.idle_workers != 1:
                await anyio.lowlevel.checkpoint()
        # The parked worker is handed request 2 in the very step the connection ends: its
        # slot and scope must not stay counted, served or not.
        second.set()
        with anyio.fail_after(5):
            await peer.wait_closed()
    assert peer.requests_in_flight == 0
    assert peer.idle_workers == 0
    await out_send.aclose()
    await out_receive.aclose()
