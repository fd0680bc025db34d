"""The resource watchdog against real processes that really allocate memory.

Positive checks wait for the event itself (a trip, a "ready" line), bounded by DEADLINE_S.
Negative checks ("never trips") watch for QUIET_S under ``move_on_after``; that can only let a
broken watchdog pass by accident, never fail a good one. Every process is started in its own
session and its whole group is SIGKILLed when the test ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psutil
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from acp_bridge.process.watchdog import WatchdogLimits, WatchdogTrip, tree_rss_bytes, watch_rss

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
DEADLINE_S = 10.0  # bound for things that must happen (they take well under a second)
QUIET_S = 0.3  # window for negative checks only
MIB = 1 << 20
FAST = 0.02  # a sampling interval that makes a negative window hold many samples


@asynccontextmanager
async def started(*argv: str) -> AsyncIterator[Process]:
    """``argv`` in its own session; the whole group is SIGKILLed and reaped on exit."""
    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with anyio.CancelScope(shield=True), anyio.move_on_after(DEADLINE_S):
            await process.wait()
            await process.aclose()


class Lines:
    """JSON-RPC over a process's raw pipes: write a request, read lines until its response."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._next_id = 0

    async def readline(self) -> bytes:
        with anyio.fail_after(DEADLINE_S):
            return await self._stdout.receive_until(b"\n", 1 << 20)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self._next_id += 1
        msg = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        await self._stdin.send(json.dumps(msg).encode() + b"\n")
        while True:
            reply = json.loads(await self.readline())
            if reply.get("id") == self._next_id:
                assert "result" in reply, reply
                return reply["result"]

    async def start_prompt(self, session_id: str, text: str) -> None:
        """Send a prompt and return at once (a hog turn never answers)."""
        self._next_id += 1
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        msg = {"jsonrpc": "2.0", "id": self._next_id, "method": "session/prompt", "params": params}
        await self._stdin.send(json.dumps(msg).encode() + b"\n")


def echo_agent() -> tuple[str, ...]:
    return (sys.executable, "-u", str(AGENTS / "echo_agent.py"), "--quiet")


async def test_a_hogging_agent_trips_the_limit_and_is_left_alive(tmp_path: Path) -> None:
    limit = 150 * MIB
    async with started(*echo_agent()) as agent:
        rpc = Lines(agent)
        await rpc.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session = await rpc.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        await rpc.start_prompt(session["sessionId"], "hog 400 20")
        with anyio.fail_after(DEADLINE_S):
            trip = await watch_rss(agent.pid, WatchdogLimits(limit, interval_s=0.05))
        assert trip.limit_bytes == limit
        assert trip.rss_bytes > limit
        assert trip.reason.startswith("watchdog: tree RSS ")
        assert trip.reason.endswith(" MiB over the 150 MiB limit")
        # It measures and reports; killing is the supervisor's job.
        assert agent.returncode is None
        assert psutil.Process(agent.pid).status() != psutil.STATUS_ZOMBIE


async def test_an_idle_agent_under_the_limit_never_trips() -> None:
    async with started(*echo_agent()) as agent:
        trip: WatchdogTrip | None = None
        with anyio.move_on_after(QUIET_S) as window:
            trip = await watch_rss(agent.pid, WatchdogLimits(1024 * MIB, interval_s=FAST))
        assert window.cancelled_caught, trip
        assert agent.returncode is None


async def test_without_a_limit_it_waits_until_cancelled() -> None:
    async with started(*echo_agent()) as agent:
        with anyio.move_on_after(QUIET_S) as window:
            await watch_rss(agent.pid, WatchdogLimits(None))
        assert window.cancelled_caught


CHILD = textwrap.dedent(
    """
    import mmap, sys, time
    block = bytearray(120 << 20)
    block[::mmap.PAGESIZE] = b"x" * len(range(0, len(block), mmap.PAGESIZE))
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    time.sleep(60)
    """
)
PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])"


async def test_the_tree_rss_counts_a_child_s_memory() -> None:
    async with started(sys.executable, "-c", PARENT) as parent:
        assert await Lines(parent).readline() == b"ready"
        total = await anyio.to_thread.run_sync(tree_rss_bytes, parent.pid)
        own = psutil.Process(parent.pid).memory_info().rss
        assert len(psutil.Process(parent.pid).children()) == 1
        assert own < 100 * MIB
        assert total - own >= 120 * MIB


async def test_a_process_that_is_gone_reads_zero_and_never_trips() -> None:
    async with started(sys.executable, "-c", "pass") as gone:
        with anyio.fail_after(DEADLINE_S):
            await gone.wait()
        assert tree_rss_bytes(gone.pid) == 0
        with anyio.move_on_after(QUIET_S) as window:
            await watch_rss(gone.pid, WatchdogLimits(1, interval_s=FAST))
        assert window.cancelled_caught


@pytest.fixture
def zombie_pid() -> Iterator[int]:
    """A child that has exited but is not reaped yet: a zombie until the fixture ends."""
    zombie = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        # WNOWAIT: block until it has exited, but leave it unreaped.
        os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)
        yield zombie.pid
    finally:
        zombie.kill()
        zombie.wait()


async def test_a_zombie_is_not_measured(zombie_pid: int) -> None:
    assert psutil.Process(zombie_pid).status() == psutil.STATUS_ZOMBIE
    assert tree_rss_bytes(zombie_pid) == 0
    with anyio.move_on_after(QUIET_S) as window:
        await watch_rss(zombie_pid, WatchdogLimits(1, interval_s=FAST))
    assert window.cancelled_caught


@pytest.mark.parametrize(
    ("limit", "interval_s"),
    [(0, 0.5), (-1, 0.5), (True, 0.5), (1.5, 0.5), (MIB, 0.0), (MIB, -1.0), (MIB, float("nan"))],
)
def test_invalid_limits_are_rejected(limit: Any, interval_s: float) -> None:
    with pytest.raises(ValueError):
        WatchdogLimits(limit, interval_s=interval_s)
