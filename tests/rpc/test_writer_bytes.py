"""LineWriter's queue bounded in bytes, and the ByteBudget it counts in (issue 20, defect 2).

The bound is "no more once this much waits": a line of any size gets into an empty queue, and
at most the bound plus one line waits. The peer here is a memory stream nobody reads until the
test says so, so a write blocks the way a full pipe does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from acp_bridge.errors import ResourceClosedError
from acp_bridge.rpc.framing import ByteBudget, LineWriter
from tests.helpers import MemoryByteReceiveStream, MemoryByteSendStream

pytestmark = pytest.mark.anyio

LONG = 5000  # over PIPE_BUF: always queued, never written by the sender itself
BIG = 600_000  # over half the writer's batch: each such line is a write of its own


@asynccontextmanager
async def _unread_pipe() -> AsyncIterator[tuple[MemoryByteSendStream, MemoryByteReceiveStream]]:
    """A stream whose writes block until the other end receives (a full pipe)."""
    send, receive = anyio.create_memory_object_stream[bytes](0)
    async with send, receive:
        yield MemoryByteSendStream(send), MemoryByteReceiveStream(receive)


async def _written(receive: MemoryByteReceiveStream) -> bytes:
    """The next write, whole."""
    return await receive.receive(1 << 30)


def _line(size: int, tag: bytes = b"x") -> bytes:
    return tag * (size - 1) + b"\n"


async def test_senders_wait_once_the_queued_bytes_reach_the_bound() -> None:
    async with _unread_pipe() as (send, receive):
        writer = LineWriter(send, max_queued_bytes=3 * BIG)
        sent: list[int] = []

        async def sender(index: int) -> None:
            await writer.send_line(_line(BIG, b"%d" % index))
            sent.append(index)

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            for index in range(6):
                tg.start_soon(sender, index)
            await anyio.wait_all_tasks_blocked()
            # One line is being written (blocked on the unread stream) and counts until it is;
            # three fit under the bound, the other senders wait.
            assert len(sent) == 3
            assert writer.queued_bytes == 3 * BIG
            got = [await _written(receive) for _ in range(6)]
            writer.close()
        assert sorted(got) == sorted(_line(BIG, b"%d" % i) for i in range(6))
        assert sorted(sent) == list(range(6))
        assert writer.queued_bytes == 0


async def test_one_line_larger_than_the_bound_still_gets_in() -> None:
    async with _unread_pipe() as (send, receive):
        writer = LineWriter(send, max_queued_bytes=100)
        huge = _line(10 * LONG)
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            await writer.send_line(huge)  # the queue was empty: it goes in
            assert writer.queued_bytes == len(huge)
            late = anyio.Event()

            async def second() -> None:
                await writer.send_line(_line(LONG))
                late.set()

            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            assert not late.is_set()  # the bound is passed: the next line waits
            assert await _written(receive) == huge
            await late.wait()
            assert await _written(receive) == _line(LONG)
            writer.close()


async def test_wait_room_returns_at_once_while_there_is_room_and_waits_at_the_bound() -> None:
    async with _unread_pipe() as (send, receive):
        writer = LineWriter(send, max_queued_bytes=LONG)
        with anyio.fail_after(1):
            await writer.wait_room()  # empty: no wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            await writer.send_line(_line(LONG))
            roomy = anyio.Event()

            async def waiter() -> None:
                await writer.wait_room()
                roomy.set()

            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert not roomy.is_set()
            await _written(receive)
            await roomy.wait()
            writer.close()


async def test_a_shared_budget_counts_the_queue_and_gets_everything_back() -> None:
    """A relay shares one budget between its buffers: the writer charges it with what is
    queued and releases it when written, or when dropped."""
    budget = ByteBudget(10 * BIG)
    async with _unread_pipe() as (send, receive):
        writer = LineWriter(send, max_queued_bytes=10 * BIG, budget=budget)
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            for _ in range(3):
                await writer.send_line(_line(BIG))
            assert budget.used == writer.queued_bytes == 3 * BIG
            await _written(receive)
            await anyio.wait_all_tasks_blocked()
            assert budget.used == 2 * BIG  # the second line is being written: still counted
            tg.cancel_scope.cancel()  # the connection ends with lines queued
        writer.dispose()
        assert budget.used == writer.queued_bytes == 0
        with pytest.raises(ResourceClosedError):
            await writer.send_line(_line(BIG))


async def test_a_sender_cancelled_while_it_waits_for_room_leaves_nothing_behind() -> None:
    async with _unread_pipe() as (send, receive):
        writer = LineWriter(send, max_queued_bytes=LONG, queue_size=4)
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            await writer.send_line(_line(LONG, b"a"))
            with anyio.move_on_after(0) as scope:
                await writer.send_line(_line(LONG, b"b"))
            assert scope.cancelled_caught
            assert writer.queued_bytes == LONG
            assert await _written(receive) == _line(LONG, b"a")
            await writer.send_line(_line(LONG, b"c"))  # its slot and bytes were given back
            assert await _written(receive) == _line(LONG, b"c")
            writer.close()


async def test_a_budget_wakes_its_waiters_once_there_is_room() -> None:
    budget = ByteBudget(10)
    budget.charge(25)  # one line of any size: charging never refuses
    assert not budget.has_room
    woken: list[int] = []

    async def waiter(index: int) -> None:
        await budget.wait_room()
        woken.append(index)

    async with anyio.create_task_group() as tg:
        for index in range(2):
            tg.start_soon(waiter, index)
        await anyio.wait_all_tasks_blocked()
        budget.release(10)
        await anyio.wait_all_tasks_blocked()
        assert woken == []  # 15 still wait: no room below 10
        budget.release(10)
    assert sorted(woken) == [0, 1]
    assert budget.used == 5


def test_a_budget_needs_a_positive_bound() -> None:
    with pytest.raises(ValueError, match="positive"):
        ByteBudget(0)


async def test_a_fenced_line_that_waited_for_room_is_dropped_not_written_after_the_fence() -> None:
    """A relay forwards a dead turn's line; it waits for room; meanwhile the fence goes up and
    the bridge's own answer is queued. The waiting line must not land after that answer."""
    async with _unread_pipe() as (send, receive):
        writer = LineWriter(send, max_queued_bytes=LONG + 1)
        fence_up = False
        outcome: list[bool] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.run)
            await writer.send_line(_line(LONG, b"a"))  # being written: the pipe is full
            await writer.send_line(_line(LONG, b"b"))  # queued: now the bound is reached

            async def forward() -> None:
                line = _line(LONG, b"c")
                outcome.append(await writer.send_line(line, fenced=lambda: fence_up))

            tg.start_soon(forward)
            await anyio.wait_all_tasks_blocked()  # the forwarder waits for room
            fence_up = True
            answer = _line(100, b"A")
            got = await _written(receive)  # "a", or "a" and "b" in one write: room for "c"
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(writer.send_line, answer)  # the bridge's answer, after the fence
            while not got.endswith(answer):
                got += await _written(receive)
            writer.close()
        assert outcome == [False]
        assert got == _line(LONG, b"a") + _line(LONG, b"b") + answer  # never the fenced "c"
