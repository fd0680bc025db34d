"""The restore plan: waiting sessions first, a budget per session, a bounded concurrency, and
failures that never stop the other restores. Driven by restores that wait on events the test
sets, so nothing depends on timing except the one budget that must run out."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from acp_bridge.core.restore_plan import RestoreBudget, RestoreRefused, restore_all

pytestmark = pytest.mark.anyio


async def test_every_waiting_session_is_back_before_any_other_is_sent() -> None:
    started: list[int] = []
    finished: list[int] = []

    async def restore(item: int) -> None:
        started.append(item)
        await anyio.lowlevel.checkpoint()
        finished.append(item)

    items = list(range(20))
    waiting = {13, 7}
    budget = RestoreBudget(concurrency=4)
    failures = await restore_all(items, restore, budget, waiting=waiting.__contains__)
    assert failures == []
    assert set(started[:2]) == waiting
    # no other restore starts before both waiting ones are done
    assert set(finished[:2]) == waiting
    assert sorted(started) == items


async def test_no_more_than_the_bound_are_in_flight() -> None:
    release = anyio.Event()
    in_flight = 0
    most = 0

    async def restore(item: int) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()
        in_flight -= 1

    async with anyio.create_task_group() as tg:
        result: list[object] = []

        async def run() -> None:
            result.append(await restore_all(range(50), restore, RestoreBudget(concurrency=8)))

        tg.start_soon(run)
        await anyio.wait_all_tasks_blocked()
        assert in_flight == 8
        release.set()
    assert most == 8
    assert result == [[]]


async def test_a_session_over_its_budget_fails_alone() -> None:
    async def restore(item: str) -> None:
        if item == "stuck":
            await anyio.sleep_forever()

    items = ["a", "stuck", "b", "c"]
    budget = RestoreBudget(per_session_s=0.2, concurrency=2)
    failures = await restore_all(items, restore, budget)
    assert failures == [("stuck", "did not restore within 0.2 s")]


async def test_a_refusal_is_a_failure_with_its_reason_and_the_others_go_on() -> None:
    async def restore(item: int) -> None:
        if item % 3 == 0:
            raise RestoreRefused(f"session/load failed: -32002 no session {item}")

    failures = await restore_all(range(7), restore, RestoreBudget(concurrency=3))
    assert sorted(failures) == [
        (0, "session/load failed: -32002 no session 0"),
        (3, "session/load failed: -32002 no session 3"),
        (6, "session/load failed: -32002 no session 6"),
    ]


class ProcessDied(Exception):
    pass


async def test_the_death_of_the_process_ends_the_whole_restore() -> None:
    cancelled: list[int] = []

    async def restore(item: int) -> None:
        if item == 5:
            await anyio.wait_all_tasks_blocked()
            raise ProcessDied
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(item)
            raise

    with pytest.raises(ProcessDied):
        try:
            await restore_all(range(8), restore, RestoreBudget(concurrency=8))
        except BaseExceptionGroup as group:  # the task group wraps it
            assert len(group.exceptions) == 1
            raise group.exceptions[0] from None
    assert sorted(cancelled) == [0, 1, 2, 3, 4, 6, 7]


def test_a_budget_must_be_usable() -> None:
    with pytest.raises(ValueError, match="per_session_s"):
        RestoreBudget(per_session_s=0)
    with pytest.raises(ValueError, match="concurrency"):
        RestoreBudget(concurrency=0)
