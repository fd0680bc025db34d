"""Writing a line at once, or not at all: the path that spares a bounded write its timer.

``try_send_now`` on our pipe streams writes a whole item when the pipe (or asyncio's transport,
below its high-water mark) takes it without waiting, and otherwise writes nothing.
``LineWriter.send_line_now`` uses it only when nothing else is being written or waiting, and
``JsonRpcPeer.notify_within`` arms its timer only when that declines. A ``session/cancel`` to
an agent whose stdin has room therefore costs no timer; one to an agent that stopped reading
still gives up within the bound.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import pytest

from acp_bridge.errors import ConnectionClosedError
from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream, direct_send
from acp_bridge.rpc.framing import LineWriter
from acp_bridge.rpc.peer import JsonRpcPeer

pytestmark = pytest.mark.anyio

LINE = b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}\n'


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


def drain(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def fill(send_now: Callable[[bytes], bool]) -> int:
    """Write LINE at once until the stream declines (it never waits); how many it took."""
    taken = 0
    while send_now(LINE):  # bounded by the pipe, or by the transport's high-water mark
        taken += 1
        assert taken < 1_000_000
    assert taken > 0
    assert not send_now(LINE)  # still full: nothing written, no wait
    return taken


async def test_a_pipe_with_room_takes_the_item_whole_and_a_full_one_takes_nothing(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    stream = FdSendStream(write_fd)
    taken = fill(stream.try_send_now)
    assert drain(read_fd) == LINE * taken  # only whole items, in order
    assert stream.try_send_now(LINE)  # room again
    assert drain(read_fd) == LINE
    await stream.aclose()


async def test_an_item_longer_than_pipe_buf_or_a_stream_that_is_no_pipe_is_declined(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    stream = FdSendStream(write_fd)
    assert not stream.try_send_now(b"x" * (select.PIPE_BUF + 1))  # could be written in part
    assert drain(read_fd) == b""
    await stream.aclose()
    with tempfile.TemporaryFile() as file:
        not_a_pipe = FdSendStream(file.fileno())
        assert not not_a_pipe.try_send_now(LINE)
        await not_a_pipe.aclose()
        assert os.fstat(file.fileno()).st_size == 0


async def test_a_pipe_whose_reader_is_gone_is_a_broken_resource(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.close(read_fd)
    stream = FdSendStream(write_fd)
    with pytest.raises(anyio.BrokenResourceError):
        stream.try_send_now(LINE)
    await stream.aclose()


async def test_a_process_stdin_takes_lines_at_once_until_its_reader_falls_behind() -> None:
    """On both backends: an agent that never reads its stdin. asyncio's transport counts as
    written below its high-water mark (as ``send`` does); trio's pipe until it is full."""
    child = [sys.executable, "-c", "import signal; signal.pause()"]  # alive, never reading
    async with await anyio.open_process(child) as process:
        assert process.stdin is not None
        stream = direct_send(process.stdin)
        fill(stream.try_send_now)  # type: ignore[attr-defined]
        process.kill()
        await process.wait()


async def test_a_process_stdin_line_written_at_once_reaches_the_process() -> None:
    echo = [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.readline())"]
    async with await anyio.open_process(echo) as process:
        assert process.stdin is not None and process.stdout is not None
        writer = LineWriter(process.stdin)
        assert writer.send_line_now(LINE)
        with anyio.fail_after(10):
            assert await process.stdout.receive() == LINE
        writer.dispose()
        await process.wait()


async def test_the_writer_declines_while_another_line_is_being_written(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    stream = FdSendStream(write_fd)
    writer = LineWriter(stream)
    assert not writer.send_line_now(b"x" * (select.PIPE_BUF + 1) + b"\n")  # only short lines
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        try:
            big = b"y" * (1 << 20) + b"\n"  # more than a pipe holds: the writer's task waits
            with anyio.fail_after(10):
                await writer.send_line(big)  # queued, then taken by the writer's task
                await anyio.wait_all_tasks_blocked()
            received = drain(read_fd)  # room in the pipe; the writer's task has not resumed
            assert not writer.send_line_now(LINE)  # it would land inside the long line
            with anyio.fail_after(10):
                while len(received) < len(big):
                    await anyio.wait_readable(read_fd)
                    received += drain(read_fd)
            assert received == big
            assert writer.send_line_now(LINE)  # the way is clear again
            assert drain(read_fd) == LINE
            writer.close()
        finally:
            # Should an assertion fail mid-line, the writer's task finishes its line shielded:
            # closing the reading end lets that write fail instead of waiting forever.
            os.close(read_fd)
    await stream.aclose()


async def test_the_writer_declines_while_lines_wait_in_its_queue(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    stream = FdSendStream(write_fd)
    writer = LineWriter(stream)
    long_line = b"z" * (select.PIPE_BUF + 1) + b"\n"  # always queued, for the writer's task
    await writer.send_line(long_line)  # the task is not running yet: the line waits
    assert not writer.send_line_now(LINE)  # it would overtake the queued line
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        with anyio.fail_after(10):
            await anyio.wait_all_tasks_blocked()
        writer.close()
    assert drain(read_fd) == long_line
    await stream.aclose()


async def test_a_memory_stream_is_never_written_at_once() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](10)
    async with send, receive:
        writer = LineWriter(send)  # type: ignore[arg-type]
        assert not writer.send_line_now(LINE)
        assert receive.statistics().current_buffer_used == 0
        writer.dispose()


async def test_writing_at_once_to_a_broken_pipe_breaks_the_writer(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    os.close(read_fd)
    writer = LineWriter(FdSendStream(write_fd))
    with pytest.raises(ConnectionClosedError):
        writer.send_line_now(LINE)
    with pytest.raises(ConnectionClosedError):  # the failure is kept for every later line
        await writer.send_line(LINE)
    writer.dispose()


@contextlib.asynccontextmanager
async def peer_writing_to(write_fd: int) -> AsyncIterator[tuple[JsonRpcPeer, list[bytes]]]:
    """A running peer whose output is ``write_fd``; its input is a pipe that stays silent."""
    back_read, back_write = os.pipe()
    peer = JsonRpcPeer(FdReceiveStream(back_read), FdSendStream(write_fd), name="agent")
    seen: list[bytes] = []
    peer.add_observer(lambda direction, line: seen.append(line) if direction == "out" else None)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            yield peer, seen
            await peer.aclose()
    finally:
        for fd in (back_read, back_write):
            with contextlib.suppress(OSError):
                os.close(fd)


async def test_notify_within_writes_at_once_to_a_pipe_with_room(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    async with peer_writing_to(write_fd) as (peer, seen):
        assert await peer.notify_within("session/cancel", {"sessionId": "s"}, 5.0)
        assert drain(read_fd).count(b"session/cancel") == 1
        assert len(seen) == 1  # the observers saw the line once


async def test_notify_within_gives_up_on_a_pipe_nobody_reads(pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe
    async with peer_writing_to(write_fd) as (peer, seen):
        with contextlib.suppress(BlockingIOError):  # the agent stopped reading: fill its stdin
            while True:
                os.write(write_fd, b"\n")
        with anyio.fail_after(10):
            written = await peer.notify_within("session/cancel", {"sessionId": "s"}, 0.05)
        assert not written  # within the bound, not after it
        assert len(seen) == 1
        assert b"session/cancel" not in drain(read_fd)  # and nothing of it half-written
