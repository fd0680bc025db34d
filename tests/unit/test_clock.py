"""``loop_clock`` reads the very clock ``anyio.current_time()`` reads, a trio mock clock too."""

from __future__ import annotations

import anyio
import pytest

from acp_bridge.clock import loop_clock


@pytest.mark.anyio
async def test_the_loop_clock_reads_what_anyio_reads() -> None:
    read = loop_clock()
    before = anyio.current_time()
    now = read()
    after = anyio.current_time()
    assert before <= now <= after


def test_the_loop_clock_follows_a_trio_mock_clock() -> None:
    trio_testing = pytest.importorskip("trio.testing")
    mock = trio_testing.MockClock()

    async def main() -> None:
        read = loop_clock()
        start = read()
        assert start == anyio.current_time()  # a mock clock only moves when told to
        mock.jump(3600)
        assert read() == anyio.current_time() == start + 3600

    anyio.run(main, backend="trio", backend_options={"clock": mock})
