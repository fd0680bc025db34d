"""Turns against real agents, through the TurnDriver and the Session's own calls: cooperative,
stubborn, wrong stopReason, late updates, deadlines."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.events import ToolCallClosed, UpdateReceived
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.client.turn_driver import TurnDriver
from acp_bridge.core.turn_machine import EndedBy, TurnStatus, TurnTimings
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
OPTIONS = ClientOptions(
    restart=RestartPolicy(initial_delay_s=0.01, max_delay_s=0.05),
    shutdown=ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5),
    cancel_grace_s=0.5,
)
POLICY = TurnPolicy(timings=TurnTimings(cancel_grace_s=0.5))


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), *flags], name=script[:-3])


class Recorder:
    """Collects a turn's events; cancels the turn once ``cancel_after`` updates arrived."""

    def __init__(self, driver: TurnDriver, cancel_after: int | None = None) -> None:
        self.driver = driver
        self.cancel_after = cancel_after
        self.events: list[Any] = []

    async def __call__(self, event: Any) -> None:
        self.events.append(event)
        updates = sum(isinstance(e, UpdateReceived) for e in self.events)
        if self.cancel_after is not None and updates == self.cancel_after:
            self.driver.request_cancel(EndedBy.STOP)

    def texts(self) -> list[str]:
        return [
            str(e.raw.get("content", {}).get("text", ""))
            for e in self.events
            if isinstance(e, UpdateReceived)
        ]


async def test_a_cooperative_agent_cancels_and_the_turn_reads_cancelled(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        recorder = Recorder(driver, cancel_after=1)
        with anyio.fail_after(20):
            outcome = await driver.run("echo waiting; wait", recorder)
        assert (outcome.status, outcome.stop_reason, outcome.quarantined) == (
            TurnStatus.CANCELLED,
            "cancelled",
            False,
        )
        assert outcome.ended_by is EndedBy.STOP
        assert agent.generation == 1


async def test_end_turn_in_answer_to_a_cancel_still_closes_the_turn_as_cancelled(
    tmp_path: Path,
) -> None:
    async with open_supervised_agent(fake("wrong_stop_agent.py"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        outcome = await driver.run("echo x; tool in_progress; wait", Recorder(driver, 1))
    assert (outcome.status, outcome.stop_reason) == (TurnStatus.CANCELLED, "end_turn")


async def test_an_error_answer_during_the_drain_closes_quietly(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        outcome = await driver.run("on-cancel error; echo x; wait", Recorder(driver, 1))
    assert outcome.status is TurnStatus.CANCELLED
    assert outcome.error is not None


async def test_a_stubborn_agent_is_quarantined_at_the_grace_window_and_replaced(
    tmp_path: Path,
) -> None:
    spec = fake("stubborn_agent.py", "--history", str(tmp_path / "history.json"))
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        driver = TurnDriver(session, POLICY)
        recorder = Recorder(driver, cancel_after=1)
        with anyio.fail_after(20):
            outcome = await driver.run("echo x; tool in_progress; hang", recorder)
            assert outcome.status is TurnStatus.CANCELLED and outcome.quarantined
            # The open tool call was closed once, as failed.
            closed = [e for e in recorder.events if isinstance(e, ToolCallClosed)]
            assert len(closed) == 1
            # The next turn runs on the restored session, on a new process.
            after = await driver.run("echo next", Recorder(driver))
        assert after.status is TurnStatus.DONE
        assert agent.generation == 2


async def test_a_cancel_requested_before_the_turn_starts_applies_to_it(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def run() -> None:
                result.append(await driver.run("echo x; wait", Recorder(driver)))

            tg.start_soon(run)
            await anyio.wait_all_tasks_blocked()
            driver.request_cancel(EndedBy.STOP)
            driver.request_cancel(EndedBy.CLOSE)  # harmless
        assert result[0].status is TurnStatus.CANCELLED
        assert result[0].ended_by is EndedBy.STOP


async def test_late_updates_after_the_answer_never_reach_the_next_turn(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("late_agent.py", "--late", "2000"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        first = await driver.run("echo one", Recorder(driver))
        second_recorder = Recorder(driver)
        second = await driver.run("echo two", second_recorder)
    assert first.status is second.status is TurnStatus.DONE
    assert not [t for t in second_recorder.texts() if t.startswith("late-1-")]


async def test_late_updates_without_message_ids_are_fenced_after_a_cancel(
    tmp_path: Path,
) -> None:
    spec = fake("late_agent.py", "--no-message-ids")
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        driver = TurnDriver(session, replace(POLICY, settle_s=0.2))
        first = await driver.run("late 3000; echo x; wait", Recorder(driver, cancel_after=1))
        second_recorder = Recorder(driver)
        await driver.run("echo two", second_recorder)
    assert first.status is TurnStatus.CANCELLED
    assert not [t for t in second_recorder.texts() if t.startswith("late-")]
    assert any(
        str(u.get("content", {}).get("text", "")).startswith("late-") for u in session.stray_updates
    )


async def test_the_idle_deadline_cancels_a_silent_turn(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        policy = TurnPolicy(timings=TurnTimings(cancel_grace_s=0.5, idle_timeout_s=0.3))
        driver = TurnDriver(await agent.new_session(tmp_path), policy)
        outcome = await driver.run("echo x; wait", Recorder(driver))
    assert outcome.status is TurnStatus.CANCELLED
    assert outcome.ended_by is EndedBy.IDLE_DEADLINE
    assert outcome.reason == "the agent sent nothing for 0.3 s"


async def test_a_crash_mid_turn_is_a_recoverable_failure(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("echo_agent.py"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        outcome = await driver.run("echo x; crash 4", Recorder(driver))
        assert (outcome.status, outcome.ended_by, outcome.recoverable) == (
            TurnStatus.FAILED,
            EndedBy.CRASH,
            True,
        )
        assert (await driver.run("echo again", Recorder(driver))).status is TurnStatus.DONE


async def test_cancel_writes_session_cancel_in_the_callers_task(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        cancels: list[str] = []
        agent.connection.peer.add_observer(
            lambda direction, line: cancels.append(direction)
            if b"session/cancel" in bytes(line)
            else None
        )
        first = anyio.Event()

        async def on_event(event: Any) -> None:
            first.set()

        outcome = None

        async def run_turn() -> None:
            nonlocal outcome
            outcome = await driver.run("echo x; wait", on_event)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_turn)
                await first.wait()
                await driver.cancel(EndedBy.STOP)
                assert cancels == ["out"]  # written before cancel() returned
        assert outcome is not None and outcome.status is TurnStatus.CANCELLED
        assert cancels == ["out"]  # and only once
