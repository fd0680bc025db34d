"""Lines over the pipes of ``anyio.open_process``, read and written without anyio's extra pass.

anyio's process streams take a full scheduler pass per call (before every trio read and write,
after every asyncio write). The line reader and writer now use the same pipes directly
(:func:`~acp_bridge.rpc.fdstream.direct_receive`, :func:`~acp_bridge.rpc.fdstream.direct_send`).
These tests pin that the fast path is taken, that it takes no pass, and that everything the
plain streams guaranteed still holds: order, long lines, the end of the stream, a closed or
broken pipe.
"""

from __future__ import annotations

import os
import sys

import anyio
import anyio.lowlevel
import pytest
import sniffio

from acp_bridge.errors import ConnectionClosedError, ResourceClosedError
from acp_bridge.rpc.fdstream import direct_receive, direct_send
from acp_bridge.rpc.framing import LineReader, LineWriter

pytestmark = pytest.mark.anyio

def _cat() -> list[str]:
    """A child that echoes its stdin as it comes."""
    return [
        sys.executable,
        "-u",
        "-c",
        "import os\n"
        "while True:\n"
        "    data = os.read(0, 65536)\n"
        "    if not data:\n"
        "        break\n"
        "    os.write(1, data)\n",
    ]


async def test_process_pipes_get_the_direct_streams() -> None:
    async with await anyio.open_process(_cat()) as process:
        assert process.stdin is not None and process.stdout is not None
        assert direct_send(process.stdin) is not process.stdin
        receive = direct_receive(process.stdout)
        if sniffio.current_async_library() == "trio":
            assert receive is not process.stdout
        else:  # asyncio's process reader takes no extra pass already
            assert receive is process.stdout
        await process.stdin.aclose()
        await process.wait()


async def test_a_memory_stream_is_left_alone() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](1)
    async with send, receive:
        assert direct_send(send) is send  # type: ignore[arg-type]
        assert direct_receive(receive) is receive  # type: ignore[arg-type]


async def test_lines_to_an_idle_process_pipe_take_no_scheduler_pass() -> None:
    async with await anyio.open_process(_cat()) as process:
        assert process.stdin is not None and process.stdout is not None
        writer = LineWriter(process.stdin)
        reader = LineReader(process.stdout)
        passes = 0
        stop = False

        async def count_passes() -> None:
            nonlocal passes
            while not stop:
                passes += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(count_passes)
            await anyio.lowlevel.checkpoint()
            before = passes
            for n in range(20):
                await writer.send_line(b"line %d\n" % n)
            during = passes - before
            stop = True
        assert during == 0
        with anyio.fail_after(10):
            assert [await reader.receive_line() for _ in range(20)] == [
                b"line %d" % n for n in range(20)
            ]
        writer.dispose()
        await process.stdin.aclose()
        with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):
                await reader.receive_line()
        await process.wait()


async def test_long_lines_and_many_lines_cross_a_process_pipe_whole_and_in_order() -> None:
    lines = [os.urandom(n).hex().encode() for n in (1, 3000, 700_000, 5, 200_000)]
    lines += [b"short %d" % n for n in range(2000)]
    async with await anyio.open_process(_cat()) as process:
        assert process.stdin is not None and process.stdout is not None
        writer = LineWriter(process.stdin)
        reader = LineReader(process.stdout)
        received: list[bytes] = []
        all_read = anyio.Event()

        async def read_all() -> None:
            while len(received) < len(lines):
                received.append(await reader.receive_line())
            all_read.set()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer.run)
                tg.start_soon(read_all)
                for line in lines:
                    await writer.send_line(line + b"\n")
                await all_read.wait()
                writer.close()
        assert received == lines
        writer.dispose()
        await process.stdin.aclose()
        await process.wait()


async def test_closing_a_process_stdout_wakes_a_blocked_line_reader() -> None:
    async with await anyio.open_process(_cat()) as process:
        assert process.stdin is not None and process.stdout is not None
        reader = LineReader(process.stdout)
        outcome: list[BaseException] = []

        async def read() -> None:
            try:
                await reader.receive_line()
            except BaseException as exc:  # recorded for the assertion
                outcome.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await anyio.wait_all_tasks_blocked()
                await process.stdout.aclose()
        assert len(outcome) == 1
        ended = (ResourceClosedError, ConnectionClosedError, anyio.EndOfStream)
        assert isinstance(outcome[0], ended)
        # Reading a closed pipe again never touches a (perhaps reused) descriptor.
        with pytest.raises(ended):
            await reader.receive_line()
        await process.stdin.aclose()
        await process.wait()


async def test_writing_to_a_process_that_exited_is_a_closed_connection() -> None:
    async with await anyio.open_process([sys.executable, "-c", "pass"]) as process:
        assert process.stdin is not None
        await process.wait()
        writer = LineWriter(process.stdin)
        with anyio.fail_after(10), pytest.raises(ConnectionClosedError):
            for _ in range(100):  # the first write may still land in the pipe's buffer
                await writer.send_line(b"x\n")
        writer.dispose()


async def test_a_cancelled_read_from_a_process_pipe_loses_nothing() -> None:
    async with await anyio.open_process(_cat()) as process:
        assert process.stdin is not None and process.stdout is not None
        send, receive = direct_send(process.stdin), direct_receive(process.stdout)
        with anyio.move_on_after(0.05) as waited:
            await receive.receive()  # nothing yet: cancelled while waiting
        assert waited.cancelled_caught
        await send.send(b"first\n")
        with anyio.CancelScope() as scope:
            scope.cancel()
            await receive.receive()  # cancelled before it reads: the bytes stay where they are
        assert scope.cancelled_caught
        with anyio.fail_after(10):
            assert await receive.receive() == b"first\n"
        await process.stdin.aclose()
        await process.wait()
