"""A client's outbox paces its writes: the first update of a burst at once, then at most one
write per period of the endpoint's :class:`Pacer`, with everything put meanwhile joined into it
(issue 22's fan-out: each write wakes a client, and ten clients woken per update starve the host
on a small machine). One pacer releases all the outboxes it holds in one pass: one timer for
ten clients, not ten.

The outbox's connection here records what it is handed (the outbox's pacing is what is tested;
the real socket path, ``LineWriter.send_now``, is tests/rpc/test_send_now.py, and the whole
host with real clients is tests/host/test_host_core.py). Periods are long (30 s) where a test
shows that something does NOT wait for the period's end, so no test depends on the machine's
speed.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from acp_bridge.host import clients
from acp_bridge.host.clients import Outbox, Pacer

pytestmark = pytest.mark.anyio

LINE = b'{"jsonrpc":"2.0","method":"session/update","params":{}}\n'


class Recording:
    """A connection that takes every write at once and notes it, with the time."""

    def __init__(self, *, idle: bool = True) -> None:
        self.idle = idle
        self.gate: anyio.Event | None = None  # set: send_lines waits for it (a slow stream)
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
        if self.gate is not None:
            await self.gate.wait()
        self._note(data)

    def _note(self, data: bytes) -> None:
        self.writes.append((anyio.current_time(), data))
        self.written.set()
        self.written = anyio.Event()

    def data(self) -> bytes:
        return b"".join(data for _, data in self.writes)


async def _until(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not predicate():
            await anyio.lowlevel.checkpoint()


async def _put_and_wait_for_a_write(connection: Recording, outbox: Outbox, numbers: range) -> None:
    """Put a piece per number, then wait for the connection's next write."""
    written = connection.written
    for n in numbers:
        outbox.put(b"%d\n" % n)
    with anyio.fail_after(10):
        await written.wait()


@asynccontextmanager
async def paced(pacer: Pacer, *outboxes: Outbox) -> AsyncIterator[None]:
    """``pacer`` running and each outbox's pump, for the block."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(pacer.run)
        for outbox in outboxes:
            tg.start_soon(outbox.pump, 60.0)
        await _until(lambda: pacer.running)
        yield
        tg.cancel_scope.cancel()


async def test_the_first_piece_goes_at_once_in_the_callers_task() -> None:
    connection, pacer = Recording(), Pacer(30)
    outbox = Outbox(1 << 20, connection, pacer)
    async with paced(pacer, outbox):
        assert outbox.put(LINE)
        assert connection.writes == [(connection.writes[0][0], LINE)]  # before any await
        assert outbox.handed_count == outbox.put_count == 1
        assert outbox.queued_bytes == 0


async def test_a_burst_is_joined_into_one_write_per_period() -> None:
    connection, pacer = Recording(), Pacer(0.05)
    outbox = Outbox(1 << 20, connection, pacer)
    async with paced(pacer, outbox):
        outbox.put(b"0\n")  # at once
        for n in range(1, 100):
            outbox.put(b"%d\n" % n)  # within the period: held
        assert len(connection.writes) == 1
        assert outbox.held
        await outbox.wait_handed(outbox.put_count)  # hurries the rest out
        assert len(connection.writes) == 2  # the 99 pieces in one write
        assert connection.data() == b"".join(b"%d\n" % n for n in range(100))
        # A burst with no one waiting: each group of 50 pieces put within a period goes out
        # in one write once the period ended, everything in order.
        for group in range(4):
            await _put_and_wait_for_a_write(
                connection, outbox, range(100 + 50 * group, 150 + 50 * group)
            )
    assert connection.data() == b"".join(b"%d\n" % n for n in range(300))
    assert len(connection.writes) == 2 + 4  # 200 pieces, four writes
    times = [when for when, _ in connection.writes[1:]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= 0.05 * 0.9 for gap in gaps), gaps  # never two writes within a period


async def test_the_period_holds_a_piece_back_until_it_ends() -> None:
    connection, pacer = Recording(), Pacer(30)
    outbox = Outbox(1 << 20, connection, pacer)
    async with paced(pacer, outbox):
        outbox.put(b"first\n")
        outbox.put(b"second\n")
        for _ in range(10):
            await anyio.lowlevel.checkpoint()  # the pump had every chance to write it
        assert outbox.held
        assert connection.data() == b"first\n"
        assert outbox.queued_bytes == len(b"second\n")


async def test_one_pass_of_the_pacer_releases_every_outbox_it_holds() -> None:
    """Ten clients written in one period are released together, by one wake-up of the pacer,
    and each gets what it was put, in one write."""
    pacer = Pacer(0.05)
    connections = [Recording() for _ in range(10)]
    outboxes = [Outbox(1 << 20, connection, pacer) for connection in connections]
    async with paced(pacer, *outboxes):
        for outbox in outboxes:
            outbox.put(b"a\n")  # each at once: the period starts here
        for outbox in outboxes:
            outbox.put(b"b\n")
            outbox.put(b"c\n")
        assert all(outbox.held for outbox in outboxes)
        passes = pacer.passes
        await _until(lambda: all(len(c.writes) == 2 for c in connections))
        assert pacer.passes == passes + 1
    for connection in connections:
        assert [data for _, data in connection.writes] == [b"a\n", b"b\nc\n"]


async def test_a_put_after_the_period_ended_goes_at_once() -> None:
    """The pace only holds what comes within a period of the last write: a put after a quiet
    spell is written at once, with no wake-up of the pacer. (The pacer's clock is the test's:
    a period passes when the test says so.)"""
    now = [100.0]
    connection, pacer = Recording(), Pacer(30, clock=lambda: now[0])
    outbox = Outbox(1 << 20, connection, pacer)
    async with paced(pacer, outbox):
        outbox.put(b"first\n")
        now[0] += 30  # the period is over
        outbox.put(b"second\n")
        assert connection.data() == b"first\nsecond\n"  # before any await
        assert pacer.passes == 0


async def test_a_full_batch_does_not_wait_for_the_period() -> None:
    connection, pacer = Recording(), Pacer(30)
    outbox = Outbox(64 << 20, connection, pacer)
    big = LINE * (clients._WRITE_BATCH_BYTES // len(LINE) + 1)
    async with paced(pacer, outbox):
        outbox.put(b"first\n")
        outbox.put(big)
        await _until(lambda: outbox.handed_count == 2)
        assert connection.data() == b"first\n" + big


async def test_waiting_for_the_hand_over_does_not_wait_for_the_period() -> None:
    """An answer or a question that must follow the updates (``wait_handed``) is not held back
    by the pace."""
    connection, pacer = Recording(), Pacer(30)
    outbox = Outbox(1 << 20, connection, pacer)
    async with paced(pacer, outbox):
        outbox.put(b"first\n")
        outbox.put(b"second\n")
        assert outbox.held
        with anyio.fail_after(10):
            assert await outbox.wait_handed(outbox.put_count)
        assert connection.data() == b"first\nsecond\n"


async def test_a_connection_written_only_by_its_task_is_paced_through_the_pump() -> None:
    """A connection that cannot be written from another task (a WebSocket; here one that
    never can): nothing is written in the caller's task. The first piece of a period goes to
    the pump at once, what follows within the period is held and then handed over in one
    write, in order."""
    connection, pacer = Recording(idle=False), Pacer(0.05)
    outbox = Outbox(1 << 20, connection, pacer)
    async with paced(pacer, outbox):
        written = connection.written
        outbox.put(b"0\n")
        assert connection.writes == []  # the pump writes it
        with anyio.fail_after(10):
            await written.wait()
        for group in range(3):
            await _put_and_wait_for_a_write(
                connection, outbox, range(1 + 10 * group, 11 + 10 * group)
            )
        await outbox.wait_handed(outbox.put_count)
    assert connection.data() == b"".join(b"%d\n" % n for n in range(31))
    assert len(connection.writes) == 4  # one, then each group of ten in one write
    times = [when for when, _ in connection.writes]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= 0.05 * 0.9 for gap in gaps), gaps


async def test_pieces_put_while_the_pump_writes_follow_at_once() -> None:
    """While the pump is writing (a slow stream), what is put meanwhile is not held for the
    pace: the pump writes it next, in order."""
    connection, pacer = Recording(idle=False), Pacer(30)
    connection.gate = anyio.Event()
    outbox = Outbox(1 << 20, connection, pacer)
    async with paced(pacer, outbox):
        outbox.put(b"first\n")
        await _until(lambda: outbox._writing)  # the write waits for the gate
        for n in range(10):
            outbox.put(b"%d\n" % n)
        assert not outbox.held
        connection.gate.set()
        await _until(lambda: outbox.handed_count == outbox.put_count)
    assert connection.data() == b"first\n" + b"".join(b"%d\n" % n for n in range(10))


async def test_without_a_running_pacer_nothing_is_held() -> None:
    connection = Recording()
    outbox = Outbox(1 << 20, connection, Pacer(30))  # the pacer is not running
    for n in range(5):
        assert outbox.put(b"%d\n" % n)
    assert len(connection.writes) == 5
    assert outbox.queued_bytes == 0


async def test_a_stopping_pacer_releases_what_it_holds() -> None:
    connection, pacer = Recording(), Pacer(30)
    outbox = Outbox(1 << 20, connection, pacer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pacer.run)
        await _until(lambda: pacer.running)
        outbox.put(b"first\n")
        outbox.put(b"second\n")
        assert outbox.held
        tg.cancel_scope.cancel()
    assert not pacer.running
    assert connection.data() == b"first\nsecond\n"


async def test_the_bound_counts_what_the_pace_holds() -> None:
    connection, pacer = Recording(), Pacer(30)
    outbox = Outbox(100, connection, pacer)
    async with paced(pacer, outbox):
        assert outbox.put(b"x" * 90 + b"\n")  # at once: never queued
        assert outbox.put(b"y" * 90 + b"\n")  # held for the period's end
        assert not outbox.put(b"z" * 20 + b"\n")  # would pass the bound
        assert outbox.queued_bytes == 91
