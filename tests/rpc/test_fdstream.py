"""Byte streams over pipe descriptors, and two peers talking across a real process boundary."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from acp_bridge.errors import RpcError
from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream
from acp_bridge.rpc.peer import JsonRpcPeer

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-u", "-m", "scripts.bench.rpc", "--role", "serve-ours"]
"""The RPC benchmark's echo server: our peer on its stdin/stdout (run from the checkout)."""


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


async def test_bytes_cross_a_pipe_in_order_and_eof_ends_the_stream(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    receive, send = FdReceiveStream(read_fd), FdSendStream(write_fd, close_fd=True)
    payload = os.urandom(3 * 1024 * 1024)  # far more than the pipe buffer: writes must wait
    received = bytearray()

    async def read_all() -> None:
        try:
            while True:
                received.extend(await receive.receive())
        except anyio.EndOfStream:
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_all)
        await send.send(payload)
        await send.aclose()
    assert bytes(received) == payload
    await receive.aclose()
    assert os.get_blocking(read_fd)


async def test_writing_to_a_pipe_nobody_reads_is_a_broken_resource(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.close(read_fd)
    send = FdSendStream(write_fd)
    with pytest.raises(anyio.BrokenResourceError):
        await send.send(b"x")
    await send.aclose()


async def test_a_closed_stream_refuses_use_and_wakes_a_blocked_reader(
    pipe: tuple[int, int],
) -> None:
    read_fd, _write_fd = pipe
    receive = FdReceiveStream(read_fd)
    outcome: list[type[BaseException]] = []

    async def blocked_read() -> None:
        try:
            await receive.receive()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            outcome.append(type(exc))

    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked_read)
        await anyio.wait_all_tasks_blocked()
        await receive.aclose()
    assert outcome
    with pytest.raises(anyio.ClosedResourceError):
        await receive.receive()


async def test_a_cancelled_receive_never_drops_bytes(pipe: tuple[int, int]) -> None:
    """Issue 7 (6): the old receive read the pipe first and checkpointed after, so a
    cancellation delivered at that checkpoint threw the bytes away and the next receive
    saw EOF. Now the cancellation lands before the read and the bytes wait for the next one."""
    read_fd, write_fd = pipe
    receive = FdReceiveStream(read_fd)
    os.write(write_fd, b"precious line\n")
    os.close(write_fd)
    for _ in range(3):  # however often a receive is cancelled, nothing is taken
        with anyio.CancelScope() as scope:
            scope.cancel()
            await receive.receive()
        assert scope.cancelled_caught
    assert await receive.receive() == b"precious line\n"
    with pytest.raises(anyio.EndOfStream):
        await receive.receive()
    await receive.aclose()


async def test_a_receive_cancelled_while_waiting_keeps_later_bytes(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    receive = FdReceiveStream(read_fd)
    waiting = anyio.Event()

    async def blocked_receive(scope: anyio.CancelScope) -> None:
        with scope:
            waiting.set()
            await receive.receive()

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked_receive, scope)
        await waiting.wait()
        await anyio.wait_all_tasks_blocked()
        os.write(write_fd, b"late")
        scope.cancel()
    assert await receive.receive() == b"late"
    await receive.aclose()


async def test_a_send_cancelled_after_its_first_byte_still_writes_the_whole_item(
    pipe: tuple[int, int],
) -> None:
    """Half a JSON line in the pipe would corrupt every later line: once an item has started,
    a cancelled sender finishes it (the JSON-RPC writer relies on this for direct writes)."""
    read_fd, write_fd = pipe
    send = FdSendStream(write_fd)
    item = b"x" * (4 * 1024 * 1024) + b"\n"  # far more than the pipe holds
    scope = anyio.CancelScope()
    finished = anyio.Event()

    async def sender() -> None:
        with scope:
            await send.send(item)
        finished.set()

    received = bytearray()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await anyio.wait_all_tasks_blocked()  # the pipe is full, part of the item written
        scope.cancel()
        with anyio.move_on_after(10):  # the old code stopped mid-item: the rest never comes
            while not finished.is_set() or len(received) < len(item):
                await anyio.wait_readable(read_fd)
                received.extend(os.read(read_fd, 1024 * 1024))
    assert len(received) == len(item)
    assert bytes(received) == item
    await send.aclose()


async def test_two_peers_talk_across_a_real_process_boundary() -> None:
    """Our peer in the test, our peer in a child process on its stdin/stdout pipes."""
    async with await anyio.open_process(
        SERVER,
        cwd=ROOT,
        stderr=None,
    ) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        peer = JsonRpcPeer(process.stdout, process.stdin, name="server")
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            with anyio.fail_after(20):
                assert await peer.request("echo", {"text": "hé\nllo"}) == {"text": "hé\nllo"}
                with pytest.raises(RpcError) as info:
                    await peer.request("session/unknown", {})
                assert info.value.code == -32601
            await process.stdin.aclose()  # EOF: the child's peer ends and the child exits
            with anyio.fail_after(20):
                await peer.wait_closed()
                assert await process.wait() == 0
