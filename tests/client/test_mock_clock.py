"""One clock: every deadline of a turn and of a restart reads ``anyio.current_time()``, so a
mock clock drives them. Pinned to trio, the backend with a mock clock: trio's ``MockClock``
with autojump moves time forward whenever every task has been blocked for a while (here, on a
real agent that ignores the cancel), so a 10-minute grace window and a 5-minute restart delay
pass in about a second of real time. Before, the restart delay and exit records read
``time.monotonic()`` and could not be driven this way.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import anyio
import pytest

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.client.turn_driver import TurnDriver
from acp_bridge.core.turn_machine import EndedBy, TurnStatus, TurnTimings
from acp_bridge.errors import AgentExitedError
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec

trio_testing = pytest.importorskip("trio.testing")

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
GRACE_S = 600.0
RESTART_DELAY_S = 300.0


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    # Jump only after 2 s of real time with every task blocked: far longer than any real step
    # here (a Python agent starting, a SIGKILL reaped), so only the long windows are skipped.
    # rate=1: between jumps the clock runs at real speed, so the short shutdown waits (the
    # lingering agent's 0.5 s stdin-close grace) pass in 0.5 s instead of a 2 s jump each.
    return ("trio", {"clock": trio_testing.MockClock(rate=1.0, autojump_threshold=2.0)})


async def test_a_long_grace_window_and_restart_delay_run_on_the_mock_clock(
    tmp_path: Path,
) -> None:
    spec = AgentSpec(
        [
            sys.executable,
            "-u",
            str(AGENTS / "stubborn_agent.py"),
            "--history",
            str(tmp_path / "history.json"),
        ],
        name="stubborn",
    )
    options = ClientOptions(
        restart=RestartPolicy(
            first_delay_s=RESTART_DELAY_S,
            initial_delay_s=RESTART_DELAY_S,
            max_delay_s=RESTART_DELAY_S,
        ),
        shutdown=ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5),
        startup_timeout_s=math.inf,
        cancel_grace_s=GRACE_S,
    )
    real_started = anyio.current_time()
    async with open_supervised_agent(spec, options) as agent:
        session = await agent.new_session(tmp_path)
        driver = TurnDriver(session, TurnPolicy(timings=TurnTimings(cancel_grace_s=GRACE_S)))

        async def cancel_at_once(_event: object) -> None:
            driver.request_cancel(EndedBy.CALLER)

        started = anyio.current_time()
        outcome = await driver.run("echo x; hang", cancel_at_once)
        closed_after = anyio.current_time() - started
        assert outcome.status is TurnStatus.CANCELLED and outcome.quarantined
        assert GRACE_S <= closed_after < GRACE_S + 5  # on the mock clock
        response = await session.run("echo next")  # a quarantine restarts at once
        assert response.stop_reason == "end_turn"
        assert anyio.current_time() - started < GRACE_S + RESTART_DELAY_S
        assert agent.generation == 2
        crashed_at = anyio.current_time()
        with pytest.raises(AgentExitedError):
            await session.run("crash KILL")
        response = await session.run("echo after")  # waits out the mock restart delay
        assert response.stop_reason == "end_turn"
        assert anyio.current_time() - crashed_at >= RESTART_DELAY_S
        assert agent.generation == 3
    assert anyio.current_time() - real_started >= GRACE_S  # the clock is the mock one
