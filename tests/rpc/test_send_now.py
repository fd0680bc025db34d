"""Writing a fan-out's batch to a Unix socket at once, in the caller's task.

``LineWriter.send_now`` writes as much as the socket takes and queues the rest ahead of every
other line, so a line that follows can never land inside the batch. It is offered only for a
Unix socket stream with nothing being written or waiting: never for a pipe, a memory stream, or
a stream layered over a socket (TLS, WebSocket), which would be written around.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import UNIXSocketStream

from acp_bridge.errors import ConnectionClosedError
from acp_bridge.rpc.framing import LineWriter

pytestmark = pytest.mark.anyio


def _lines(count: int, tag: str = "x") -> bytes:
    return b"".join(
        b'{"jsonrpc":"2.0","method":"session/update","params":{"n":%d,"t":"%s"}}\n'
        % (n, tag.encode())
        for n in range(count)
    )


@contextlib.asynccontextmanager
async def _socket_writer(
    send_buffer: int | None = None,
) -> AsyncIterator[tuple[LineWriter, socket.socket]]:
    """A writer of one end of a Unix socket pair (its run() task going), and the other end."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if send_buffer is not None:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, send_buffer)
    theirs.setblocking(True)
    stream = await UNIXSocketStream.from_socket(ours)
    writer = LineWriter(stream)

    async def run() -> None:
        with contextlib.suppress(ConnectionClosedError):  # a test that breaks it
            await writer.run()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            yield writer, theirs
            writer.close()
    finally:
        await stream.aclose()
        theirs.close()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


async def test_a_batch_the_socket_takes_is_written_at_once() -> None:
    async with _socket_writer() as (writer, theirs):
        batch = _lines(50)
        assert writer.can_send_now()
        assert writer.send_now(batch) is None  # all of it, with no wait and no task hop
        assert writer.queued_bytes == 0
        assert await anyio.to_thread.run_sync(_read_exactly, theirs, len(batch)) == batch


async def test_the_rest_goes_first_and_the_next_line_after_it() -> None:
    """A batch larger than the socket's buffer: the socket takes a part, the writer queues the
    rest ahead of everything; a line sent next lands after the whole batch."""
    async with _socket_writer(send_buffer=4096) as (writer, theirs):
        batch = _lines(20_000, "batch")  # about 1.5 MiB: far more than the buffer
        rest = writer.send_now(batch)
        assert rest is not None and not rest.is_set()
        assert not writer.can_send_now()  # the rest is still to write
        with pytest.raises(RuntimeError):
            writer.send_now(b"{}\n")
        after = b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: writer.send_line(after, wait_written=True))
            received = await anyio.to_thread.run_sync(
                _read_exactly, theirs, len(batch) + len(after)
            )
        assert received == batch + after
        assert rest.is_set()
        assert writer.can_send_now()
        assert writer.queued_bytes == 0


async def test_only_a_unix_socket_stream_is_written_so() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](10)
    async with send, receive:
        writer = LineWriter(send)  # type: ignore[arg-type]
        try:
            assert not writer.can_send_now()
            with pytest.raises(RuntimeError):
                writer.send_now(b"{}\n")
        finally:
            writer.dispose()


async def test_a_stream_layered_over_a_socket_is_not_written_around() -> None:
    """A stream wrapping a Unix socket (as TLS or the WebSocket framing does) exposes the raw
    socket among its attributes; writing that socket directly would skip the layer."""
    from anyio.streams.buffered import BufferedByteStream

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stream = await UNIXSocketStream.from_socket(ours)
    try:
        layered = BufferedByteStream(stream)
        writer = LineWriter(layered)
        assert not writer.can_send_now()
        writer.dispose()
    finally:
        await stream.aclose()
        theirs.close()


async def test_a_broken_socket_raises_and_breaks_the_writer() -> None:
    async with _socket_writer() as (writer, theirs):
        theirs.close()
        with pytest.raises(ConnectionClosedError):
            writer.send_now(_lines(10))
        assert not writer.can_send_now()
        with pytest.raises(ConnectionClosedError):
            await writer.send_line(b"{}\n")
