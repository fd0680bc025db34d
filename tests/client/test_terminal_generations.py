"""Terminals belong to the agent process (generation) that created them and die with it.

Regressions for issue 7, defect 10: after a crash or a quarantine, the old agent's terminals
kept running and counted against the new agent's ``max_terminals``. Real processes throughout;
death is proven by connect-back sockets closing and by psutil (pids and process groups).
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from acp_bridge.client.terminal import GenerationTerminals, TerminalManager
from acp_bridge.errors import ErrorCode, RpcError
from acp_bridge.process import killer
from tests.client.test_terminal import alive_args, ids, running
from tests.process.liveness import open_liveness

pytestmark = pytest.mark.anyio

LIMIT = 6
# end_generation's bound: SIGTERM grace, SIGKILL wait (QUICK in test_terminal), process scans;
# plus a second of slack for a loaded machine.
END_BOUND_S = 0.5 + 5.0 + 2.0 + 1.0


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    return tmp_path.resolve()


async def create(terminals: GenerationTerminals, **params: Any) -> str:
    result = await terminals.create({"sessionId": "s1", **params})
    terminal_id: str = result["terminalId"]
    return terminal_id


def trees(manager: TerminalManager, generation: int) -> list[psutil.Process]:
    """Every process of the generation's terminals as they are now."""
    found = []
    for pid in manager.pids(generation).values():
        found += killer.tree_snapshot(pid)
        found += killer.group_members(pid)
    return found


async def unknown(call: Any, terminal_id: str) -> None:
    with pytest.raises(RpcError) as info:
        await call
    assert info.value.code == ErrorCode.RESOURCE_NOT_FOUND
    assert info.value.data == {"terminalId": terminal_id}


async def test_ending_a_generation_kills_its_terminals_and_frees_the_limit(cwd: Path) -> None:
    async with open_liveness() as liveness, running(cwd, max_terminals=LIMIT) as manager:
        old, new = manager.for_generation(1), manager.for_generation(2)
        # Every kind of tree: grandchild in the group, grandchild in its own session, a command
        # that ignores SIGTERM, a shell whose background job holds the pipe, plain sleeps.
        await create(old, **alive_args(liveness, "parent:child"))
        await create(old, **alive_args(liveness, "parent:escapee"))
        await create(old, **alive_args(liveness, "stubborn"))
        await create(old, command="sleep 1000 & sleep 1000")
        while len(manager.pids(1)) < LIMIT:
            await create(old, command="sleep", args=["1000"])
        peers = await liveness.accept(5)
        with pytest.raises(RpcError) as info:  # the old terminals count against the limit...
            await create(new, command="true")
        assert info.value.data == {"reason": "too_many_terminals", "limit": LIMIT}

        old_ids, pgids = list(manager.pids(1)), list(manager.pids(1).values())
        processes = trees(manager, 1)
        assert len(processes) >= LIMIT + 3
        started = anyio.current_time()
        with anyio.fail_after(END_BOUND_S):
            await manager.end_generation(1)
        elapsed = anyio.current_time() - started

        await liveness.assert_closed(*peers)
        assert killer.living(processes) == []
        assert [pgid for pgid in pgids if killer.group_members(pgid)] == []
        assert manager.pids(1) == {}
        for tid in old_ids:  # ...and are forgotten, by both generations
            await unknown(old.output(ids(tid)), tid)
            await unknown(new.output(ids(tid)), tid)
        new_ids = [await create(new, command="sleep", args=["1000"]) for _ in range(LIMIT)]
        assert sorted(manager.pids(2)) == sorted(new_ids)
        with pytest.raises(RpcError) as info:
            await create(old, command="true")  # an ended generation starts nothing more
        assert info.value.data == {"reason": "generation_ended"}
        assert elapsed < END_BOUND_S


async def test_a_generation_sees_only_its_own_terminals(cwd: Path) -> None:
    async with running(cwd) as manager:
        first, second = manager.for_generation(1), manager.for_generation(2)
        tid = await create(first, command="sleep", args=["1000"])
        pid = manager.pids()[tid]
        for handler in (second.output, second.wait_for_exit, second.kill, second.release):
            await unknown(handler(ids(tid)), tid)
        for legacy in (manager.output, manager.kill, manager.release):  # generation 0
            await unknown(legacy(ids(tid)), tid)
        assert killer.living([psutil.Process(pid)])  # nobody else's kill reached it
        assert "exitStatus" not in await first.output(ids(tid))
        await first.kill(ids(tid))
        with anyio.fail_after(20):
            assert await first.wait_for_exit(ids(tid)) == {"exitCode": None, "signal": "SIGTERM"}
        assert await first.release(ids(tid)) == {}
        await unknown(first.output(ids(tid)), tid)


async def test_ending_one_generation_leaves_the_others_running(cwd: Path) -> None:
    async with running(cwd) as manager:
        keep = await create(manager.for_generation(2), command="sleep", args=["1000"])
        doomed = await create(manager.for_generation(1), command="sleep", args=["1000"])
        survivor, victim = psutil.Process(manager.pids()[keep]), manager.pids()[doomed]
        await manager.end_generation(1)
        assert killer.group_members(victim) == []
        assert killer.living([survivor]) == [survivor]
        assert list(manager.pids()) == [keep]
        await manager.end_generation(1)  # again: nothing left, returns at once


async def test_ending_a_generation_is_bounded_when_an_orphan_holds_the_pipe(cwd: Path) -> None:
    """The command exits at once, leaving a grandchild in a session of its own that holds the
    output pipe and descends from nothing we track: end_generation still returns in time. (That
    orphan cannot be found, so it survives; the test kills it by its unique argument.)"""
    duration = f"1000.{secrets.randbelow(10**6):06d}"
    orphan = (
        "import os\n"
        "if os.fork() == 0:\n"
        f"    os.setsid(); os.execvp('sleep', ['sleep', '{duration}'])\n"
        "print('parent done', flush=True)\n"
    )
    try:
        async with running(cwd) as manager:
            gen = manager.for_generation(1)
            tid = await create(gen, command=sys.executable, args=["-c", orphan])
            with anyio.fail_after(20):
                assert await gen.wait_for_exit(ids(tid)) == {"exitCode": 0, "signal": None}
            assert (await gen.output(ids(tid)))["output"] == "parent done\n"
            with anyio.fail_after(END_BOUND_S):
                await manager.end_generation(1)
            assert manager.pids() == {}
    finally:
        for proc in psutil.process_iter(["cmdline"]):
            if proc.info["cmdline"] == ["sleep", duration]:
                proc.kill()


async def test_old_callers_still_work_as_generation_0(cwd: Path) -> None:
    async with running(cwd) as manager:
        result = await manager.create({"sessionId": "s1", "command": "echo legacy"})
        tid = result["terminalId"]
        with anyio.fail_after(20):
            assert await manager.wait_for_exit(ids(tid)) == {"exitCode": 0, "signal": None}
        assert (await manager.for_generation(0).output(ids(tid)))["output"] == "legacy\n"
        await manager.end_generation(0)
        assert manager.pids() == {}
