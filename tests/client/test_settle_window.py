"""The settle window after a cancelled turn counts its quiet from the turn's end.

On trio's ``MockClock``: the window is long (100 s of mock time), and autojump moves the clock
only while every task has been blocked for a second of real time, so a wait of the window
shows as mock time passing and a prompt sent at once shows as almost none.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.events import UpdateReceived
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.client.turn_driver import TurnDriver
from acp_bridge.core.turn_machine import EndedBy, TurnStatus, TurnTimings
from acp_bridge.process.spec import AgentSpec

trio_testing = pytest.importorskip("trio.testing")

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
SETTLE_S = 100.0
OPTIONS = ClientOptions(startup_timeout_s=math.inf, cancel_grace_s=10 * SETTLE_S)
POLICY = TurnPolicy(
    timings=TurnTimings(cancel_grace_s=10 * SETTLE_S), settle_s=SETTLE_S, settle_max_s=5 * SETTLE_S
)


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return ("trio", {"clock": trio_testing.MockClock(autojump_threshold=1.0)})


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), *flags], name=script[:-3])


class Texts:
    """The texts of a turn's updates; cancels the turn at its first update when asked."""

    def __init__(self, driver: TurnDriver, *, cancel: bool = False) -> None:
        self.driver = driver
        self.cancel = cancel
        self.texts: list[str] = []

    async def __call__(self, event: Any) -> None:
        if isinstance(event, UpdateReceived):
            self.texts.append(str(event.raw.get("content", {}).get("text", "")))
            if self.cancel:
                self.driver.request_cancel(EndedBy.CALLER)


async def test_a_prompt_after_a_quiet_pause_does_not_wait_again(tmp_path: Path) -> None:
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        driver = TurnDriver(await agent.new_session(tmp_path), POLICY)
        first = await driver.run("echo x; wait", Texts(driver, cancel=True))
        assert first.status is TurnStatus.CANCELLED
        await anyio.sleep(SETTLE_S)  # the caller's own pause; the agent sends nothing
        started = anyio.current_time()
        second = await driver.run("echo y", Texts(driver))
        assert second.status is TurnStatus.DONE
        assert anyio.current_time() - started < SETTLE_S  # no second window


async def test_an_update_after_the_turn_ended_starts_the_window_again(tmp_path: Path) -> None:
    # Three late chunks, 300 ms of real time apart, the last one seen by the peer's observer.
    # The mock clock stands still meanwhile (it moves only by jumps), and the driver has
    # recorded the turn's end long before the last chunk.
    spec = fake("late_agent.py", "--no-message-ids", "--late", "0")
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        driver = TurnDriver(session, POLICY)
        last_late = anyio.Event()

        def observe(direction: str, line: bytes) -> None:
            if direction == "in" and b"late-1-2" in line:
                last_late.set()

        agent.connection.peer.add_observer(observe)
        first = await driver.run("late 3 300; echo x; wait", Texts(driver, cancel=True))
        assert first.status is TurnStatus.CANCELLED
        await last_late.wait()
        await anyio.sleep(SETTLE_S)  # the caller's pause: as long as the window, not quiet
        assert session.updates_seen == 4  # "x", then the three late ones
        started = anyio.current_time()
        texts = Texts(driver)
        second = await driver.run("echo two", texts)
        assert second.status is TurnStatus.DONE
        waited = anyio.current_time() - started
        assert waited > SETTLE_S - 1  # a whole quiet window after the late chunks
        assert texts.texts == ["two"]
