"""Connect-back liveness: processes dial a local socket and say ``alive <pid>``; when a process
dies its socket closes, which proves death without sleeping or polling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream


@dataclass
class Peer:
    pid: int
    role: str
    stream: SocketStream
    buffered: BufferedByteReceiveStream


@dataclass
class Liveness:
    port: int
    _arrivals: anyio.abc.ObjectReceiveStream[Peer] = field(repr=False)

    async def accept(self, count: int, timeout_s: float = 20) -> list[Peer]:
        peers = []
        with anyio.fail_after(timeout_s):
            for _ in range(count):
                peers.append(await self._arrivals.receive())
        return peers

    async def assert_closed(self, *peers: Peer, timeout_s: float = 20) -> None:
        """Each process behind ``peers`` is dead: its end of the socket closed."""
        with anyio.fail_after(timeout_s):
            for peer in peers:
                try:
                    while await peer.buffered.receive():
                        pass
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass


@asynccontextmanager
async def open_liveness() -> AsyncIterator[Liveness]:
    send, receive = anyio.create_memory_object_stream[Peer](100)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    streams: list[SocketStream] = []

    async def greet(stream: SocketStream) -> None:
        streams.append(stream)
        buffered = BufferedByteReceiveStream(stream)
        words = (await buffered.receive_until(b"\n", 200)).decode().split()
        await send.send(
            Peer(int(words[1]), words[2] if len(words) > 2 else "agent", stream, buffered)
        )

    async def accept_all() -> None:
        while True:
            try:
                stream = await listener.listeners[0].accept()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            tg.start_soon(greet, stream)

    async with anyio.create_task_group() as tg:
        tg.start_soon(accept_all)
        try:
            yield Liveness(port, receive)
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                for stream in streams:
                    await stream.aclose()
                await listener.aclose()
            send.close()
            receive.close()
