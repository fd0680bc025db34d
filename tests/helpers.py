"""In-memory plumbing for tests: byte streams and linked peer pairs (h11's ConnectionPair idea)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acp_bridge.rpc.peer import JsonRpcPeer


class MemoryByteSendStream(ByteSendStream):
    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._stream.aclose()


class MemoryByteReceiveStream(ByteReceiveStream):
    """Hands out at most ``max_bytes`` per receive, keeping the rest for the next call."""

    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream
        self._leftover = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._leftover:
            self._leftover = await self._stream.receive()
        chunk, self._leftover = self._leftover[:max_bytes], self._leftover[max_bytes:]
        return chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def memory_byte_pipe(buffer: int = 1024) -> tuple[MemoryByteSendStream, MemoryByteReceiveStream]:
    send, receive = anyio.create_memory_object_stream[bytes](buffer)
    return MemoryByteSendStream(send), MemoryByteReceiveStream(receive)


@dataclass
class RawEnd:
    """The far end of a peer's streams, for writing raw bytes at it and reading its output."""

    to_peer: MemoryByteSendStream
    from_peer: MemoryByteReceiveStream
    _buffer: bytes = b""

    async def send(self, data: bytes) -> None:
        await self.to_peer.send(data)

    async def receive_line(self) -> bytes:
        while b"\n" not in self._buffer:
            self._buffer += await self.from_peer.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line


@asynccontextmanager
async def open_peer_pair(**options: object) -> AsyncIterator[tuple[JsonRpcPeer, JsonRpcPeer]]:
    """Two running peers linked in memory; both are closed on exit."""
    a_to_b_send, a_to_b_receive = memory_byte_pipe()
    b_to_a_send, b_to_a_receive = memory_byte_pipe()
    a = JsonRpcPeer(b_to_a_receive, a_to_b_send, name="a", **options)  # type: ignore[arg-type]
    b = JsonRpcPeer(a_to_b_receive, b_to_a_send, name="b", **options)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await tg.start(a.run)
        await tg.start(b.run)
        try:
            yield a, b
        finally:
            await a.aclose()
            await b.aclose()
            for stream in (a_to_b_send, a_to_b_receive, b_to_a_send, b_to_a_receive):
                await stream.aclose()


@asynccontextmanager
async def open_raw_peer(**options: object) -> AsyncIterator[tuple[JsonRpcPeer, RawEnd]]:
    """One running peer whose far side is raw bytes under the test's control."""
    in_send, in_receive = memory_byte_pipe()
    out_send, out_receive = memory_byte_pipe()
    peer = JsonRpcPeer(in_receive, out_send, name="peer", **options)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        await tg.start(peer.run)
        try:
            yield peer, RawEnd(in_send, out_receive)
        finally:
            await peer.aclose()
            for stream in (in_send, in_receive, out_send, out_receive):
                await stream.aclose()
