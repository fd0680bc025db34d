"""Every turn keeps its deadlines, whichever public call started it, also when the caller only
waits on the turn (or iterates it) and the agent sends nothing: the turn is closed the way the
machine closes it (``session/cancel``, the grace window, a quarantine if no answer).

Against ``slow_agent.py``: it echoes, then waits for ``session/cancel`` and answers
``cancelled`` (``stubborn_agent.py`` never answers one). Each test is bounded by a generous
``fail_after``: without the deadline, none of these turns would ever end.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.events import UpdateReceived
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
from acp_bridge.core.turn_machine import EndedBy, TurnStatus, TurnTimings
from acp_bridge.errors import AgentExitedError
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
BOUND_S = 20


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), *flags], name=script[:-3])


def count_cancels(agent: SupervisedAgent) -> list[str]:
    cancels: list[str] = []
    agent.connection.peer.add_observer(
        lambda direction, line: (
            cancels.append(direction) if b"session/cancel" in bytes(line) else None
        )
    )
    return cancels


async def test_begin_keeps_the_turn_deadline_for_a_caller_that_only_waits(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        cancels = count_cancels(agent)
        with anyio.fail_after(BOUND_S):
            started = anyio.current_time()
            turn = await session.begin("echo hello; wait", TurnTimings(turn_timeout_s=0.5))
            try:
                response = await turn.wait()
            finally:
                await session.end(turn)
            assert anyio.current_time() - started >= 0.5
        assert response.stop_reason == "cancelled"  # the agent's answer to the cancel
        outcome = turn.outcome
        assert outcome is not None
        assert (outcome.status, outcome.ended_by, outcome.quarantined) == (
            TurnStatus.CANCELLED,
            EndedBy.TURN_DEADLINE,
            False,
        )
        assert session.last_outcome == outcome
        assert cancels == ["out"]
        with anyio.fail_after(BOUND_S):
            assert (await session.run("echo next")).stop_reason == "end_turn"
        assert session.last_outcome is not None
        assert session.last_outcome.ended_by is EndedBy.AGENT
        assert agent.generation == 1  # a cooperative agent is not replaced


async def test_begin_keeps_the_turn_deadline_for_a_caller_that_iterates(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        texts: list[str] = []
        with anyio.fail_after(BOUND_S):
            turn = await session.begin("echo hello; wait", TurnTimings(turn_timeout_s=0.5))
            try:
                async for event in turn:  # "hello", then nothing until the deadline
                    if isinstance(event, UpdateReceived):
                        texts.append(event.raw["content"]["text"])
            finally:
                await session.end(turn)
        assert texts == ["hello"]
        assert turn.outcome is not None and turn.outcome.ended_by is EndedBy.TURN_DEADLINE


async def test_prompt_keeps_the_idle_deadline(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        events: list[Any] = []
        timings = TurnTimings(cancel_grace_s=0.5, idle_timeout_s=0.3)
        with anyio.fail_after(BOUND_S):
            async with session.prompt("echo x; wait", timings) as turn:
                events = [event async for event in turn]
        assert len(events) == 1
        outcome = turn.outcome
        assert outcome is not None
        assert (outcome.status, outcome.ended_by) == (TurnStatus.CANCELLED, EndedBy.IDLE_DEADLINE)
        assert outcome.reason == "the agent sent nothing for 0.3 s"


async def test_run_keeps_the_idle_deadline_and_the_session_goes_on(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        with anyio.fail_after(BOUND_S):
            response = await session.run("echo x; wait", TurnTimings(idle_timeout_s=0.3))
        assert response.stop_reason == "cancelled"
        assert session.last_outcome is not None
        assert session.last_outcome.status is TurnStatus.CANCELLED
        assert session.last_outcome.ended_by is EndedBy.IDLE_DEADLINE
        with anyio.fail_after(BOUND_S):
            assert (await session.run("echo next")).stop_reason == "end_turn"


async def test_an_idle_deadline_never_cuts_a_turn_that_keeps_sending(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        timings = TurnTimings(idle_timeout_s=60)
        with anyio.fail_after(BOUND_S):
            response = await session.run("flood 2000", timings)
        assert response.stop_reason == "end_turn"
        assert session.last_outcome is not None
        assert session.last_outcome.status is TurnStatus.DONE


async def test_a_deadline_on_a_stubborn_agent_quarantines_it_after_one_grace_window(
    tmp_path: Path,
) -> None:
    spec = fake("stubborn_agent.py", "--history", str(tmp_path / "history.json"))
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        cancels = count_cancels(agent)
        timings = TurnTimings(cancel_grace_s=0.5, turn_timeout_s=0.3)
        with anyio.fail_after(BOUND_S):
            started = anyio.current_time()
            with pytest.raises(AgentExitedError):
                await session.run("echo x; hang", timings)
            assert anyio.current_time() - started >= 0.8  # the deadline, then the grace window
        outcome = session.last_outcome
        assert outcome is not None
        assert (outcome.status, outcome.ended_by, outcome.quarantined) == (
            TurnStatus.CANCELLED,
            EndedBy.TURN_DEADLINE,
            True,
        )
        assert cancels == ["out"]
        with anyio.fail_after(BOUND_S):
            assert (await session.run("echo next")).stop_reason == "end_turn"
        assert agent.generation == 2
