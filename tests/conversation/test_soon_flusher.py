"""The update log's flusher: the first update after a quiet spell is committed at once, the
ones within the interval after a flush wait for one more flush, and closing it while it waits
flushes nothing (the turn's final commit takes what is pending). Intervals are long (30 s)
where a test shows something does NOT wait, so no test depends on the machine's speed."""

from __future__ import annotations

import anyio
import pytest

from acp_bridge.conversation.update_log import FLUSH_INTERVAL_S, SoonFlusher

pytestmark = pytest.mark.anyio


class Flushes:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.changed = anyio.Event()

    async def flush(self) -> None:
        self.times.append(anyio.current_time())
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_for(self, count: int) -> None:
        with anyio.fail_after(10):
            while len(self.times) < count:
                await self.changed.wait()


def test_the_default_interval_is_20_ms() -> None:
    assert FLUSH_INTERVAL_S == 0.02


async def test_the_first_ring_flushes_at_once() -> None:
    flushes = Flushes()
    flusher = SoonFlusher(flushes.flush, name="c", interval_s=30)
    async with anyio.create_task_group() as tg:
        tg.start_soon(flusher.run)
        flusher.ring()
        await flushes.wait_for(1)  # well before 30 s
        flusher.close()


async def test_rings_within_the_interval_make_one_flush_after_it() -> None:
    flushes = Flushes()
    flusher = SoonFlusher(flushes.flush, name="c", interval_s=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(flusher.run)
        flusher.ring()
        await flushes.wait_for(1)
        for _ in range(100):
            flusher.ring()
            await anyio.lowlevel.checkpoint()
        await flushes.wait_for(2)
        flusher.close()
    assert len(flushes.times) == 2  # a hundred rings, one flush
    assert flushes.times[1] - flushes.times[0] >= 0.05 * 0.9


async def test_closed_while_waiting_it_flushes_nothing_more() -> None:
    flushes = Flushes()
    flusher = SoonFlusher(flushes.flush, name="c", interval_s=30)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(flusher.run)
            flusher.ring()
            await flushes.wait_for(1)
            flusher.ring()  # waits out the 30 s interval
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
            flusher.close()  # run() returns: the task group ends well before 30 s
    assert len(flushes.times) == 1
