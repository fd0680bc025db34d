"""host/client.relay_lines, attach's relay, on both backends: whole lines in order, the
rewrite applied, a bound of one line, and which side went away (issue 22)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from acp_bridge.errors import FramingError
from acp_bridge.host.client import RelayTargetGoneError, relay_lines
from tests.helpers import MemoryByteReceiveStream, MemoryByteSendStream, memory_byte_pipe

pytestmark = pytest.mark.anyio

Pipes = tuple[
    MemoryByteSendStream, MemoryByteReceiveStream, MemoryByteSendStream, MemoryByteReceiveStream
]


@asynccontextmanager
async def pipes() -> AsyncIterator[Pipes]:
    """(write into the source, the source, the sink, read from the sink), all closed after."""
    source_in, source = memory_byte_pipe()
    sink, sink_out = memory_byte_pipe(buffer=100)
    try:
        yield source_in, source, sink, sink_out
    finally:
        for stream in (source_in, source, sink, sink_out):
            await stream.aclose()


async def test_lines_arrive_whole_and_in_order_however_the_bytes_were_cut() -> None:
    async with pipes() as (source_in, source, sink, sink_out):
        for chunk in (b'{"a":', b'1}\n{"b"', b":2}\n\n", b'{"c":3}'):
            await source_in.send(chunk)
        await source_in.aclose()  # the last line, without its newline, still goes
        await relay_lines(source, sink, rewrite=lambda line: line.upper())
        received = b""
        while received.count(b"\n") < 4:
            received += await sink_out.receive()
    assert received == b'{"A":1}\n{"B":2}\n\n{"C":3}\n'


async def test_a_sink_that_went_away_is_told_apart_from_the_source_ending() -> None:
    async with pipes() as (source_in, source, sink, sink_out):
        await sink_out.aclose()
        await source_in.send(b"line\n")
        with pytest.raises(RelayTargetGoneError):
            await relay_lines(source, sink)


async def test_a_line_over_the_bound_ends_the_relay() -> None:
    async with pipes() as (source_in, source, sink, _):
        await source_in.send(b"x" * 100 + b"\n")
        with pytest.raises(FramingError):
            await relay_lines(source, sink, max_line_bytes=64)
