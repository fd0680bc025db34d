"""BatchLineReader's coalescing: a burst of update lines comes back as one newline-separated
block (forwarded as it came), anything else line by line; the bytes are the same either way."""

from __future__ import annotations

import anyio
import pytest

from acp_bridge.errors import FramingError
from acp_bridge.proxy.frames import UPDATE_PREFIXES
from acp_bridge.proxy.lines import BatchLineReader

pytestmark = pytest.mark.anyio

UPDATE = UPDATE_PREFIXES[0] + b'"params":{"sessionId":"s","update":{"n":%d}}}'
SPACED = UPDATE_PREFIXES[1] + b'"params": {"sessionId": "s"}}'
ANSWER = b'{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}'


class Chunks(anyio.abc.ByteReceiveStream):
    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self._chunks:
            raise anyio.EndOfStream
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        self._chunks.clear()


async def read_all(reader: BatchLineReader) -> list[bytes]:
    items: list[bytes] = []
    while True:
        try:
            items += await reader.receive_lines()
        except anyio.EndOfStream:
            return items


async def test_a_burst_of_updates_is_one_block_with_the_same_bytes() -> None:
    lines = [UPDATE % i for i in range(1000)] + [SPACED]
    data = b"\n".join(lines) + b"\n"
    reader = BatchLineReader(Chunks(data), max_line_bytes=1 << 20, coalesce_updates=True)
    items = await read_all(reader)
    assert len(items) == 2  # the first line alone, the rest as one block
    assert b"\n".join(items) + b"\n" == data
    assert all(item.startswith(UPDATE_PREFIXES) for item in items)


async def test_anything_else_in_the_burst_splits_it_into_lines() -> None:
    lines = [UPDATE % 1, UPDATE % 2, ANSWER, UPDATE % 3, UPDATE % 4]
    data = b"\n".join(lines) + b"\n"
    reader = BatchLineReader(Chunks(data), max_line_bytes=1 << 20, coalesce_updates=True)
    assert await read_all(reader) == lines


async def test_without_coalescing_every_line_comes_alone() -> None:
    lines = [UPDATE % i for i in range(10)]
    data = b"\n".join(lines) + b"\n"
    reader = BatchLineReader(Chunks(data[:50], data[50:]), max_line_bytes=1 << 20)
    assert await read_all(reader) == lines


@pytest.mark.parametrize("coalesce", [False, True])
async def test_an_over_long_line_inside_one_read_fails_after_the_lines_before_it(
    coalesce: bool,
) -> None:
    """Issue 19's surviving mutant: one read holding a complete over-long line between update
    lines was never size-checked, so it was forwarded (inside a coalesced block, or alone)."""
    lines = [UPDATE % 1, UPDATE % 2, UPDATE % 3 + b" " * 100, UPDATE % 4, UPDATE % 5]
    data = b"\n".join(lines) + b"\n"
    reader = BatchLineReader(
        Chunks(data), max_line_bytes=len(UPDATE % 1) + 50, coalesce_updates=coalesce
    )
    assert await reader.receive_lines() == lines[:2]
    with pytest.raises(FramingError) as info:
        await reader.receive_lines()
    assert info.value.fatal


async def test_an_unfinished_line_over_the_cap_breaks_the_stream_before_its_end() -> None:
    reader = BatchLineReader(Chunks(ANSWER + b"\n" + b"z" * 200, b"z\n"), max_line_bytes=100)
    assert await reader.receive_lines() == [ANSWER]
    with pytest.raises(FramingError):
        await reader.receive_lines()
