"""LineReader and LineWriter: random splits and packing, huge lines, the cap, EOF."""

from __future__ import annotations

import itertools
import select

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_bridge.errors import ConnectionClosedError, FramingError, ResourceClosedError
from acp_bridge.rpc.framing import LineReader, LineWriter
from tests.helpers import MemoryByteReceiveStream, memory_byte_pipe

BACKENDS = ["asyncio", "trio"]

lines_strategy = st.lists(
    st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")), min_size=0, max_size=40
)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


async def _read_all(chunks: list[bytes], max_line_bytes: int) -> list[bytes]:
    send, receive = memory_byte_pipe(buffer=len(chunks) + 1)
    for chunk in chunks:
        await send.send(chunk)
    await send.aclose()
    reader = LineReader(receive, max_line_bytes=max_line_bytes)
    lines = []
    try:
        while True:
            lines.append(await reader.receive_line())
    except anyio.EndOfStream:
        pass
    finally:
        await receive.aclose()
    return lines


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=lines_strategy, cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_any_split_of_the_byte_stream_yields_the_same_lines(
    backend: str, lines: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(line + b"\n" for line in lines)
    got = anyio.run(_read_all, _cut(data, cuts), 1024, backend=backend)
    assert got == lines


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=50, deadline=None)
@given(lines=lines_strategy, cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_a_last_line_without_a_newline_is_still_returned(
    backend: str, lines: list[bytes], cuts: list[int]
) -> None:
    lines = [*lines, b"tail"]
    data = b"\n".join(lines)
    assert anyio.run(_read_all, _cut(data, cuts), 1024, backend=backend) == lines


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=4096),
    chunk=st.integers(min_value=1, max_value=700),
    cap=st.integers(min_value=1, max_value=4096),
)
def test_the_cap_is_exact_whatever_the_chunking(
    backend: str, size: int, chunk: int, cap: int
) -> None:
    data = b"x" * size + b"\n" + b"next\n"
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    if size <= cap and cap >= 4:
        assert anyio.run(_read_all, chunks, cap, backend=backend) == [b"x" * size, b"next"]
    elif size > cap:
        with pytest.raises(FramingError) as info:
            anyio.run(_read_all, chunks, cap, backend=backend)
        assert info.value.fatal


@pytest.mark.anyio
async def test_a_huge_line_is_joined_once_and_stops_at_the_cap() -> None:
    big = b"y" * (24 * 1024 * 1024)
    chunks = [big[i : i + 65536] for i in range(0, len(big), 65536)] + [b"\n"]
    with anyio.fail_after(10):
        assert await _read_all(chunks, 32 * 1024 * 1024) == [big]
    with pytest.raises(FramingError), anyio.fail_after(10):
        await _read_all(chunks, 16 * 1024 * 1024)


@pytest.mark.anyio
async def test_an_unterminated_line_over_the_cap_fails_before_eof() -> None:
    send, receive = memory_byte_pipe()
    reader = LineReader(receive, max_line_bytes=100)
    await send.send(b"z" * 101)  # no newline, and the stream stays open
    with pytest.raises(FramingError), anyio.fail_after(5):
        await reader.receive_line()
    await send.aclose()
    await receive.aclose()


@pytest.mark.anyio
async def test_an_over_long_line_inside_one_read_fails_after_the_lines_before_it() -> None:
    """Issue 19's surviving mutant: one read holding a complete over-long line between other
    lines was never size-checked, so the line went through."""
    send, receive = memory_byte_pipe()
    async with send, receive:  # closed even when the test fails (else a later test warns)
        reader = LineReader(receive, max_line_bytes=10)
        await send.send(b"one\ntwo\n" + b"x" * 11 + b"\nthree\n")
        assert await reader.receive_line() == b"one"
        assert await reader.receive_line() == b"two"
        with pytest.raises(FramingError) as info:
            await reader.receive_line()
        assert info.value.fatal
        with pytest.raises(FramingError):  # the stream stays broken: it cannot be resynchronised
            await reader.receive_line()


@pytest.mark.anyio
async def test_a_broken_stream_and_a_closed_stream_are_told_apart() -> None:
    send, receive = memory_byte_pipe()
    await receive.aclose()
    with pytest.raises(ResourceClosedError):
        await LineReader(receive).receive_line()
    await send.aclose()

    class Broken(MemoryByteReceiveStream):
        async def receive(self, max_bytes: int = 65536) -> bytes:
            raise anyio.BrokenResourceError

    send2, receive2 = memory_byte_pipe()
    with pytest.raises(ConnectionClosedError):
        await LineReader(Broken(receive2._stream)).receive_line()
    await send2.aclose()
    await receive2.aclose()


def test_the_cap_must_be_positive() -> None:
    _send, receive = memory_byte_pipe()
    with pytest.raises(ValueError, match="positive"):
        LineReader(receive, max_line_bytes=0)
    _send._stream.close()
    receive._stream.close()


@pytest.mark.anyio
async def test_lines_from_many_senders_never_interleave() -> None:
    send, receive = memory_byte_pipe(buffer=10_000)
    writer = LineWriter(send, queue_size=4)
    lines = {b"%d-" % n + b"p" * (n * 97 % 5000) + b"\n" for n in range(200)}
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        async with anyio.create_task_group() as senders:
            for line in lines:
                senders.start_soon(writer.send_line, line)
        writer.close()
    await send.aclose()
    got = b"".join(await _drain(receive))
    assert sorted(got.splitlines(keepends=True)) == sorted(lines)


@pytest.mark.anyio
async def test_wait_written_returns_once_the_line_is_on_the_stream() -> None:
    send, receive = memory_byte_pipe()
    writer = LineWriter(send)
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        await writer.send_line(b"hello\n", wait_written=True)
        assert await receive.receive() == b"hello\n"
        writer.close()
    await send.aclose()
    await receive.aclose()


@pytest.mark.anyio
async def test_a_broken_stream_fails_the_writer_and_every_waiting_sender() -> None:
    send, receive = memory_byte_pipe()
    await receive.aclose()
    writer = LineWriter(send)
    failures: list[BaseException] = []

    async def run_writer() -> None:
        try:
            await writer.run()
        except ConnectionClosedError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_writer)
        with pytest.raises(ConnectionClosedError):
            await writer.send_line(b"lost\n", wait_written=True)
    assert len(failures) == 1
    with pytest.raises(ConnectionClosedError):
        await writer.send_line(b"after\n")
    await send.aclose()


@pytest.mark.anyio
async def test_a_closed_writer_refuses_lines() -> None:
    send, receive = memory_byte_pipe()
    writer = LineWriter(send)
    writer.close()
    await writer.run()
    with pytest.raises(ResourceClosedError):
        await writer.send_line(b"late\n")
    await send.aclose()
    await receive.aclose()


async def _drain(receive: MemoryByteReceiveStream) -> list[bytes]:
    chunks = []
    try:
        while True:
            chunks.append(await receive.receive())
    except anyio.EndOfStream:
        pass
    await receive.aclose()
    return chunks


@pytest.mark.anyio
async def test_a_short_line_never_overtakes_a_long_one_still_queued() -> None:
    """Short lines may be written by their sender directly, but only when nothing waits."""
    send, receive = memory_byte_pipe(buffer=10_000)
    writer = LineWriter(send)
    long_line = b"L" * (select.PIPE_BUF + 1) + b"\n"
    async with anyio.create_task_group() as tg:
        await writer.send_line(long_line)  # queued: the writer task has not run yet
        await writer.send_line(b"short\n")
        tg.start_soon(writer.run)
        await writer.send_line(b"after\n", wait_written=True)
        writer.close()
    await send.aclose()
    assert b"".join(await _drain(receive)) == long_line + b"short\nafter\n"
