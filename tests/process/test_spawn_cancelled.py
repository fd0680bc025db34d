"""A spawn cut by a cancellation: the process is stopped and reaped by the launcher, or never
started.

Before the fix, on asyncio, a spawn cancelled while asyncio connected the new process's pipes
killed that process alone (not its group) and stopped waiting for it: nothing of ours reaped
it, and once the loop had closed, asyncio's child watcher logged "Loop ... that handles pid ...
is closed". It happened at the end of a ``run`` whose agent was being restarted as it stopped.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import anyio.lowlevel
import psutil
import pytest

from acp_bridge.process.launcher import AgentProcess, ShutdownTimeouts, open_agent
from acp_bridge.process.spec import AgentSpec

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
ECHO = AgentSpec([sys.executable, "-u", str(AGENTS / "echo_agent.py"), "--quiet"])
QUICK = ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5)


def our_children() -> set[int]:
    """Our child processes, zombies included: a child nobody reaped is still listed."""
    return {child.pid for child in psutil.Process().children()}


async def test_a_spawn_cancelled_half_way_completes_and_its_process_is_stopped_and_reaped() -> None:
    opened: list[AgentProcess] = []

    async def open_and_hold() -> None:
        async with open_agent(ECHO, shutdown=QUICK) as agent:
            opened.append(agent)
            await anyio.sleep_forever()

    before = our_children()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(open_and_hold)
            # Cancel as soon as the spawn has begun: the first moment its process exists (asyncio
            # then connects its pipes; trio's worker thread returns from the fork). trio runs new
            # tasks in a random order, so a fixed number of scheduler passes is not enough.
            with anyio.fail_after(60):
                while not our_children() - before:
                    await anyio.lowlevel.checkpoint()  # a poll: the spawn gives no event
            scope.cancel()
    assert opened, "the spawn was abandoned half-way: nobody stops or reaps its process"
    assert opened[0].pid not in our_children()


async def test_a_caller_cancelled_before_the_spawn_starts_nothing() -> None:
    before = our_children()
    opened: list[AgentProcess] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with open_agent(ECHO, shutdown=QUICK) as agent:
            opened.append(agent)
    assert scope.cancelled_caught
    assert not opened
    assert our_children() <= before
