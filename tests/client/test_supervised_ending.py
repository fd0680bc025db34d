"""A supervised agent at the end of its caller's work (issue 21, items 24 and 25), against real
fake agents: no process is started only to be stopped, and a settled agent's tree is stopped
without waiting for its own teardown."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from acp_bridge.client.events import AgentExited, AgentRestarting
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
from acp_bridge.core.lifecycle import AgentPhase
from acp_bridge.errors import AgentExitedError
from acp_bridge.process.launcher import STDIN_CLOSE_GRACE_S
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from tests.process.liveness import open_liveness

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
OPTIONS = ClientOptions(  # the default stop bounds: 2 s after EOF, 2 s after SIGTERM
    restart=RestartPolicy(initial_delay_s=0.01, max_delay_s=0.05, max_restarts=3),
    startup_timeout_s=20,
)


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), "--quiet", *flags])


def lifecycle(agent: SupervisedAgent, kind: type) -> list[object]:
    return [event for event in agent.event_log if isinstance(event, kind)]


async def test_an_exit_nothing_waits_for_starts_no_process_and_fails_the_turn_recoverable(
    tmp_path: Path,
) -> None:
    async with open_supervised_agent(fake("crashy_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        asked: list[bool] = []

        def needed() -> bool:
            asked.append(True)
            return False

        agent.restart_only_if(needed)
        with pytest.raises(AgentExitedError) as info:
            await session.run("the last message: the agent dies on it")
        assert asked == [True]
        assert agent.state is AgentPhase.CLOSED
        assert agent.generation == 1
        assert lifecycle(agent, AgentRestarting) == []
        exited = lifecycle(agent, AgentExited)
        assert len(exited) == 1
        assert isinstance(exited[0], AgentExited)
        assert not exited[0].will_restart
    error = info.value
    assert error.recoverable, "a later run may retry the message"
    assert "not restarting it: the bridge is stopping" in str(error)
    assert "restart limit" not in str(error)


async def test_an_exit_something_waits_for_restarts_the_agent_as_usual(tmp_path: Path) -> None:
    spec = fake("crashy_agent.py", "--crash-once-file", str(tmp_path / "crashed"))
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        agent.restart_only_if(lambda: True)
        with pytest.raises(AgentExitedError) as info:
            await session.run("dies")
        assert "restarting it and restoring the session" in str(info.value)
        assert (await session.run("after the restart")).stop_reason == "end_turn"
        assert agent.generation == 2


async def test_expect_nothing_more_stops_a_slow_exiting_tree_without_waiting_for_it(
    tmp_path: Path,
) -> None:
    """The agent takes 30 s to exit after EOF, and has a child. With the default bounds the
    stop waits ``STDIN_CLOSE_GRACE_S`` (2 s) before SIGTERM; a settled agent gets 0.2 s."""
    async with open_liveness() as liveness:
        spec = fake("slow_exit_agent.py", "--connect-back", str(liveness.port))
        async with open_supervised_agent(spec, OPTIONS) as agent:
            peers = await liveness.accept(2)  # the agent and its child
            session = await agent.new_session(tmp_path)
            assert (await session.run("hello")).stop_reason == "end_turn"
            agent.expect_nothing_more()
            assert agent.state is AgentPhase.CLOSED  # nothing is started again
            stopping_at = anyio.current_time()
        stopped_in = anyio.current_time() - stopping_at
        await liveness.assert_closed(*peers)
    assert stopped_in < STDIN_CLOSE_GRACE_S, f"the stop waited {stopped_in:.2f} s"
