"""The one supervisor's generation loop, with a scripted kind of generation (no processes).

What a front-end plugs in is a :class:`GenerationKind`; these tests plug in one that does what
the script says for each generation (get ready then exit, exit before ready, fail to spawn) and
check what the supervisor does with it: the machine's states, the hooks called in order, the
restart delays asked for, the give-up, and one meaning of an exit record.
"""

from __future__ import annotations

import anyio
import pytest

from acp_bridge.core.lifecycle import AgentPhase, ReportExit
from acp_bridge.core.supervisor import Supervisor
from acp_bridge.errors import SpawnError
from acp_bridge.process.policy import ExitRecord, GiveUp, RestartPolicy

pytestmark = pytest.mark.anyio

NO_DELAY = RestartPolicy(initial_delay_s=0.0, first_delay_s=0.0, max_restarts=2)


class Scripted:
    """Generation n does ``script[n - 1]``: "ready" (ready, then exits with code 1),
    "early" (exits before it is ready), "spawn" (the command cannot be started)."""

    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.supervisor = Supervisor("scripted", NO_DELAY, self)
        self.calls: list[str] = []
        self.restoring: list[bool] = []

    async def run_generation(self, number: int, restoring: bool) -> None:
        self.restoring.append(restoring)
        step = self.script[number - 1]
        if step == "spawn":
            raise SpawnError(f"no such command (generation {number})")
        if step in ("ready", "shutdown"):
            self.supervisor.ready(number)
            assert self.supervisor.state is AgentPhase.READY
        if step == "shutdown":
            self.supervisor.shutdown()
        self.supervisor.ending(number)
        await self.supervisor.exited(
            number, ExitRecord.of_process(anyio.current_time(), 1.0, 1, "exited with code 1")
        )

    async def exit_reported(self, report: ReportExit) -> None:
        closing = " closing" if report.closing else ""
        self.calls.append(f"exit {report.number} restart={report.will_restart}{closing}")

    def restarting(self, attempt: int, delay_s: float) -> None:
        self.calls.append(f"restart attempt {attempt}")

    async def gave_up(self, decision: GiveUp) -> None:
        self.calls.append(f"gave up after {len(decision.history)}")

    async def first_start_failed(self, record: ExitRecord) -> None:
        self.calls.append(f"first start failed: {record.reason}")


async def test_generations_follow_the_policy_until_it_gives_up() -> None:
    kind = Scripted(["ready", "ready", "ready"])
    with anyio.fail_after(5):
        await kind.supervisor.run()
    assert kind.calls == [
        "exit 1 restart=True",
        "restart attempt 1",
        "exit 2 restart=True",
        "restart attempt 2",
        "exit 3 restart=False",
        "gave up after 3",
    ]
    assert kind.restoring == [False, True, True]  # every restart restores the sessions
    assert kind.supervisor.state is AgentPhase.GAVE_UP
    assert kind.supervisor.exit_of(3) == kind.supervisor.last_exit


async def test_a_first_start_that_never_got_ready_is_not_restarted() -> None:
    kind = Scripted(["early"])
    await kind.supervisor.run()
    assert kind.calls == ["exit 1 restart=False", "first start failed: exited with code 1"]
    assert kind.supervisor.state is AgentPhase.CLOSED


async def test_the_first_spawn_failure_is_raised_to_the_runner() -> None:
    kind = Scripted(["spawn"])
    with pytest.raises(SpawnError, match="generation 1"):
        await kind.supervisor.run()
    assert kind.calls == []


async def test_a_later_spawn_failure_is_an_exit_the_policy_decides_on() -> None:
    kind = Scripted(["ready", "spawn", "ready", "ready"])
    with anyio.fail_after(5):
        await kind.supervisor.run()
    failed = kind.supervisor.exit_of(2)
    assert failed is not None
    assert failed.reason == "could not be restarted: no such command (generation 2)"
    assert (failed.returncode, failed.signal) == (None, None)
    assert kind.calls[2:4] == ["exit 2 restart=True", "restart attempt 2"]


async def test_ready_tells_the_opener_once() -> None:
    kind = Scripted(["ready", "ready", "ready"])
    async with anyio.create_task_group() as tg:
        await tg.start(kind.supervisor.run)  # returns at generation 1's ready, not later
        assert kind.supervisor.generation >= 1


async def test_a_revive_after_a_give_up_starts_a_fresh_budget() -> None:
    kind = Scripted(["ready", "ready", "ready", "ready"])
    await kind.supervisor.run()
    assert kind.supervisor.state is AgentPhase.GAVE_UP
    kind.script += ["ready", "ready"]
    async with anyio.create_task_group() as tg:
        kind.supervisor.revive(tg)
    assert kind.supervisor.generation > 4
    assert kind.calls[-1].startswith("gave up")


async def test_an_exit_after_shutdown_is_reported_closing_and_not_restarted() -> None:
    kind = Scripted(["shutdown", "ready"])
    await kind.supervisor.run()
    assert kind.calls == ["exit 1 restart=False closing"]
    assert kind.supervisor.state is AgentPhase.CLOSED
    async with anyio.create_task_group() as tg:
        kind.supervisor.revive(tg)  # nothing to revive: closed for good
    assert kind.restoring == [False]


def test_one_meaning_of_an_exit_record() -> None:
    killed = ExitRecord.of_process(1.0, 0.5, -9, "killed by SIGKILL")
    assert (killed.returncode, killed.signal) == (None, 9)
    exited = ExitRecord.of_process(1.0, 0.5, 3, "exited with code 3")
    assert (exited.returncode, exited.signal) == (3, None)
    unknown = ExitRecord.of_process(1.0, 0.5, None, "did not exit", ordered=True)
    assert (unknown.returncode, unknown.signal, unknown.ordered) == (None, None, True)
