"""The turn performs its machine in whichever task waits on it: the cancel another task asked
for, the deadlines when nothing comes, the quarantine. Here with a host that records what it
is asked (the session, against real agents, is in test_turn_deadlines.py and
test_turn_driver.py)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from acp_bridge.client.events import ToolCallClosed, TurnEvent
from acp_bridge.client.turn import Turn, TurnPolicy
from acp_bridge.core.turn_machine import EndedBy, TurnStatus, TurnTimings
from acp_bridge.errors import AgentExitedError
from acp_bridge.wire.acp import PromptAnswer

pytestmark = pytest.mark.anyio

BOUND_S = 10
CANCELLED = PromptAnswer.read({"stopReason": "cancelled"})


class Host:
    """Records the cancels and quarantines a turn asks for."""

    def __init__(self, *, writable: bool = True, quarantine_wait_s: float = 5.0) -> None:
        self.writable = writable
        self.quarantine_wait_s = quarantine_wait_s
        self.cancels = 0
        self.quarantines: list[str] = []

    async def write_cancel(self) -> bool:
        self.cancels += 1
        return self.writable

    async def quarantine(self, reason: str) -> None:
        self.quarantines.append(reason)


def started(host: Host, timings: TurnTimings | None = None) -> Turn:
    turn = Turn("s", policy=TurnPolicy(timings or TurnTimings()), host=host)
    turn.prompt_sent()
    return turn


def tool_call(tool_call_id: str) -> dict[str, object]:
    return {"sessionUpdate": "tool_call", "toolCallId": tool_call_id, "status": "in_progress"}


async def read_all(turn: Turn, into: list[TurnEvent]) -> None:
    async for event in turn:
        into.append(event)


async def test_the_waiting_consumer_writes_a_cancel_asked_for_without_blocking() -> None:
    host = Host()
    turn = started(host)
    events: list[TurnEvent] = []
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_all, turn, events)
            await wait_all_tasks_blocked()
            turn.request_cancel(EndedBy.STOP)
            assert host.cancels == 0  # not in the asker's task
            await wait_all_tasks_blocked()
            assert host.cancels == 1  # the consumer woke and wrote it
            turn.finish_now(CANCELLED)
    outcome = turn.outcome
    assert outcome is not None
    assert (outcome.status, outcome.ended_by) == (TurnStatus.CANCELLED, EndedBy.STOP)
    assert host.cancels == 1


async def test_an_early_cancel_goes_out_when_the_prompt_has() -> None:
    host = Host()
    turn = Turn("s", host=host)
    turn.request_cancel(EndedBy.INTERRUPT)  # the prompt is not out yet: nothing to cancel
    turn.prompt_sent()
    assert host.cancels == 0
    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn.wait_quietly)
            await wait_all_tasks_blocked()
            assert host.cancels == 1
            turn.finish_now(CANCELLED)
    assert turn.outcome is not None and turn.outcome.ended_by is EndedBy.INTERRUPT


async def test_a_deadline_ends_a_turn_whose_caller_only_waits_and_the_agent_never_answers() -> (
    None
):
    """Nothing is delivered and no cancel is answered: the turn deadline sends the cancel, the
    grace window quarantines, and with no exit report in time the turn's agent side ends as
    quarantined."""
    host = Host(quarantine_wait_s=0.05)
    turn = started(host, TurnTimings(cancel_grace_s=0.05, turn_timeout_s=0.05))
    with anyio.fail_after(BOUND_S), pytest.raises(AgentExitedError, match="quarantined"):
        await turn.wait()
    assert host.cancels == 1 and len(host.quarantines) == 1
    outcome = turn.outcome
    assert outcome is not None
    assert (outcome.status, outcome.ended_by, outcome.quarantined) == (
        TurnStatus.CANCELLED,
        EndedBy.TURN_DEADLINE,
        True,
    )


async def test_an_unwritable_cancel_from_another_task_ends_the_consumers_iteration_at_once() -> (
    None
):
    """The canceller's task performs the quarantine (and waits for the exit report); the
    consumer's iteration ends with the turn's close, its open tool call closed once."""
    host = Host(writable=False, quarantine_wait_s=60)
    turn = started(host)
    events: list[TurnEvent] = []
    await turn.deliver_update(tool_call("t1"))
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOUND_S):
            tg.start_soon(read_all, turn, events)
            await wait_all_tasks_blocked()
            tg.start_soon(turn.cancel, EndedBy.CALLER)
            await wait_all_tasks_blocked()
            assert host.quarantines  # the canceller waits for the report now
            assert turn.is_closed and not turn.is_done
            closed = [e for e in events if isinstance(e, ToolCallClosed)]
            assert len(closed) == 1 and closed[0].tool_call_id == "t1"
        turn.fail_now(AgentExitedError("killed", recoverable=True))  # the exit report
    outcome = turn.outcome
    assert outcome is not None and outcome.quarantined
    assert outcome.ended_by is EndedBy.CALLER


async def test_a_deadline_fires_for_a_consumer_whose_buffer_never_runs_empty() -> None:
    """The consumer always finds an event buffered, so it never waits: taking one reads the
    clock while a deadline runs."""
    host = Host()
    turn = started(host, TurnTimings(cancel_grace_s=60, turn_timeout_s=0.05))
    for n in range(3):
        await turn.deliver_update(tool_call(f"t{n}"))
    with anyio.fail_after(BOUND_S):
        while not host.cancels:
            await turn.deliver_update({"sessionUpdate": "agent_message_chunk"})
            await turn.__anext__()
            await anyio.lowlevel.checkpoint()  # lets fail_after end a loop that never would
    assert turn.machine.cancelled_by is EndedBy.TURN_DEADLINE
    turn.finish_now(CANCELLED)
    assert turn.outcome is not None and turn.outcome.status is TurnStatus.CANCELLED
