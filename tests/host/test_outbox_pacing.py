"""A client's outbox paces its writes: the first update of a burst at once, then at most one
write per ``pace_s`` with everything put meanwhile joined into it (issue 22's fan-out: each write
wakes a client, and ten clients woken per update starve the host on a small machine).

The outbox's connection here records what it is handed (the outbox's pacing is what is tested;
the real socket path, ``LineWriter.send_now``, is tests/rpc/test_send_now.py, and the whole
host with real clients is tests/host/test_host_core.py). Paces are long (30 s) where a test
shows that something does NOT wait for the pace, so no test depends on the machine's speed.
"""

from __future__ import annotations

import itertools

import anyio
import pytest

from acp_bridge.host import clients
from acp_bridge.host.clients import Outbox

pytestmark = pytest.mark.anyio

LINE = b'{"jsonrpc":"2.0","method":"session/update","params":{}}\n'


class Recording:
    """A connection that takes every write at once and notes it, with the time."""

    def __init__(self, *, idle: bool = True) -> None:
        self.idle = idle
        self.writes: list[tuple[float, bytes]] = []
        self.written = anyio.Event()

    def can_send_lines_now(self) -> bool:
        return self.idle

    def send_lines_now(self, data: bytes) -> anyio.Event | None:
        assert self.idle
        self._note(data)
        return None

    async def send_lines(self, data: bytes, *, wait_written: bool = False) -> None:
        await anyio.lowlevel.checkpoint()
        self._note(data)

    def _note(self, data: bytes) -> None:
        self.writes.append((anyio.current_time(), data))
        self.written.set()
        self.written = anyio.Event()

    def data(self) -> bytes:
        return b"".join(data for _, data in self.writes)


async def _until(predicate: object) -> None:
    with anyio.fail_after(10):
        while not predicate():  # type: ignore[operator]
            await anyio.lowlevel.checkpoint()


async def test_the_first_piece_goes_at_once_in_the_callers_task() -> None:
    connection = Recording()
    outbox = Outbox(1 << 20, connection, pace_s=30)
    assert outbox.put(LINE)
    assert connection.writes == [(connection.writes[0][0], LINE)]  # before any await
    assert outbox.handed_count == outbox.put_count == 1
    assert outbox.queued_bytes == 0


async def test_a_burst_is_joined_into_one_write_per_pace() -> None:
    connection = Recording()
    outbox = Outbox(1 << 20, connection, pace_s=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.pump, 60.0)
        outbox.put(b"0\n")  # at once
        for n in range(1, 100):
            outbox.put(b"%d\n" % n)  # within the pace: queued
        assert len(connection.writes) == 1
        await outbox.wait_handed(outbox.put_count)  # hurries the rest out
        assert len(connection.writes) == 2  # the 99 pieces in one write
        assert connection.data() == b"".join(b"%d\n" % n for n in range(100))
        # A burst with no one waiting: each group of 50 pieces put within the pace goes out
        # in one write once the pace since the last write passed, everything in order.
        for group in range(4):
            written = connection.written
            for n in range(100 + 50 * group, 150 + 50 * group):
                outbox.put(b"%d\n" % n)
            with anyio.fail_after(10):
                await written.wait()
        tg.cancel_scope.cancel()
    assert connection.data() == b"".join(b"%d\n" % n for n in range(300))
    assert len(connection.writes) == 2 + 4  # 200 pieces, four writes
    times = [when for when, _ in connection.writes[1:]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= 0.05 * 0.9 for gap in gaps), gaps  # never two writes within a pace


async def test_the_pace_holds_a_piece_back_until_it_passed() -> None:
    connection = Recording()
    outbox = Outbox(1 << 20, connection, pace_s=30)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.pump, 60.0)
        outbox.put(b"first\n")
        outbox.put(b"second\n")
        await _until(lambda: outbox._pacing)  # the pump waits out the pace
        assert connection.data() == b"first\n"
        assert outbox.queued_bytes == len(b"second\n")
        tg.cancel_scope.cancel()


async def test_a_full_batch_does_not_wait_for_the_pace() -> None:
    connection = Recording()
    outbox = Outbox(64 << 20, connection, pace_s=30)
    big = LINE * (clients._WRITE_BATCH_BYTES // len(LINE) + 1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.pump, 60.0)
        outbox.put(b"first\n")
        outbox.put(big)
        with anyio.fail_after(10):
            await _until(lambda: outbox.handed_count == 2)
        assert connection.data() == b"first\n" + big
        tg.cancel_scope.cancel()


async def test_waiting_for_the_hand_over_does_not_wait_for_the_pace() -> None:
    """An answer or a question that must follow the updates (``wait_handed``) is not held back
    by the pace."""
    connection = Recording()
    outbox = Outbox(1 << 20, connection, pace_s=30)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.pump, 60.0)
        outbox.put(b"first\n")
        outbox.put(b"second\n")
        await _until(lambda: outbox._pacing)
        with anyio.fail_after(10):
            assert await outbox.wait_handed(outbox.put_count)
        assert connection.data() == b"first\nsecond\n"
        tg.cancel_scope.cancel()


async def test_a_busy_connection_is_handed_pieces_by_the_pump() -> None:
    """When the connection is writing its own lines, nothing is written at once: the pump
    hands the pieces over, in order, through the connection's queue."""
    connection = Recording(idle=False)
    outbox = Outbox(1 << 20, connection, pace_s=0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.pump, 60.0)
        for n in range(10):
            outbox.put(b"%d\n" % n)
        assert connection.writes == []
        await outbox.wait_handed(outbox.put_count)
        tg.cancel_scope.cancel()
    assert connection.data() == b"".join(b"%d\n" % n for n in range(10))


async def test_the_bound_counts_what_the_pace_holds() -> None:
    connection = Recording()
    outbox = Outbox(100, connection, pace_s=30)
    assert outbox.put(b"x" * 90 + b"\n")  # at once: never queued
    assert outbox.put(b"y" * 90 + b"\n")  # queued behind the pace
    assert not outbox.put(b"z" * 20 + b"\n")  # would pass the bound
    assert outbox.queued_bytes == 91
