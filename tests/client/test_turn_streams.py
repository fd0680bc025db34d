"""A turn's event stream is released whichever way the turn is left."""

from __future__ import annotations

import gc
import sys
import warnings
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from acp_bridge.client.events import UpdateReceived
from acp_bridge.client.turn import Turn
from acp_bridge.core.turn_machine import TurnStatus
from acp_bridge.wire.acp import PromptAnswer

pytestmark = pytest.mark.anyio

CHUNK = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "late"}}


def unraisable_when_collected(turn: list[Turn]) -> list[Any]:
    """What collecting the (only) reference to the turn reports: an unclosed stream's
    ResourceWarning, made an error, surfaces as an unraisable exception."""
    seen: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            turn.clear()
            gc.collect()
    finally:
        sys.unraisablehook = previous
    return [str(hook.exc_value) for hook in seen]


async def test_a_turn_left_before_its_agent_side_ended_leaves_no_stream_open() -> None:
    """``Session.end`` closes the turn the caller left. If the agent's side never ended (the
    process's exit report cut off by a teardown), nothing else ever closes the turn's sending
    end: once the collector warned about an unclosed MemoryObjectSendStream. The buffer is a
    plain deque now; this pins that nothing of the turn warns when collected."""
    turn = Turn("s")
    turn.close()
    await turn.deliver_update(dict(CHUNK))  # a late update: dropped, no error
    assert unraisable_when_collected([turn]) == []


async def test_a_late_answer_after_close_still_ends_the_turn() -> None:
    turn = Turn("s")
    turn.close()
    turn.finish_now(PromptAnswer.read({"stopReason": "cancelled"}))
    assert turn.stop_reason == "cancelled"
    assert turn.machine.outcome is not None and turn.machine.outcome.status is TurnStatus.DONE
    assert (await turn.wait()).is_cancelled()


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


async def read_all(turn: Turn, into: list[str]) -> None:
    async for event in turn:
        assert isinstance(event, UpdateReceived)
        into.append(event.raw["content"]["text"])


async def test_a_consumer_waiting_on_an_empty_turn_wakes_for_each_event_and_for_the_end() -> None:
    turn = Turn("s")
    texts: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(read_all, turn, texts)
        for n in range(3):
            await wait_all_tasks_blocked()  # the consumer waits on the empty buffer
            await turn.deliver_update(chunk(str(n)))
            await wait_all_tasks_blocked()
            assert texts == [str(i) for i in range(n + 1)]
        turn.finish_now(PromptAnswer.read({"stopReason": "end_turn"}))
    turn.close()
    assert texts == ["0", "1", "2"]  # and the iteration ended with the turn


async def test_every_consumer_waiting_wakes_when_the_turn_ends() -> None:
    turn = Turn("s")
    first: list[str] = []
    second: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(read_all, turn, first)
        tg.start_soon(read_all, turn, second)
        await wait_all_tasks_blocked()
        turn.fail_now(RuntimeError("gone"))
    turn.close()
    assert first == second == []


async def test_a_full_buffer_holds_the_reader_back_and_loses_nothing() -> None:
    """At the bound the deliverer waits (backpressure); the consumer takes the waiting event
    into the buffer as it reads, and an event the deliverer puts there after its wait wakes a
    consumer that meanwhile waits on the empty buffer."""
    turn = Turn("s", buffer=2)
    delivered: list[int] = []

    async def deliver() -> None:
        for n in range(8):
            await turn.deliver_update(chunk(str(n)))
            delivered.append(n)
        turn.finish_now(PromptAnswer.read({"stopReason": "end_turn"}))

    texts: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(deliver)
        await wait_all_tasks_blocked()
        assert delivered == [0, 1]  # the third waits for room
        tg.start_soon(read_all, turn, texts)
    turn.close()
    assert texts == [str(n) for n in range(8)]
    assert turn.stop_reason == "end_turn"


async def test_a_consumer_cancelled_while_it_waits_leaves_the_turn_readable() -> None:
    turn = Turn("s")
    with anyio.move_on_after(0.01):
        await turn.__anext__()
    await turn.deliver_update(chunk("after"))
    texts: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(read_all, turn, texts)
        await wait_all_tasks_blocked()
        turn.finish_now(PromptAnswer.read({"stopReason": "end_turn"}))
    turn.close()
    assert texts == ["after"]


async def test_a_deliverer_cancelled_while_held_at_the_bound_loses_nothing() -> None:
    """At the bound the event is taken and only its deliverer waits: cancelling the wait (the
    connection ending) cannot drop it."""
    turn = Turn("s", buffer=1)
    await turn.deliver_update(chunk("0"))
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn.deliver_update, chunk("1"))
            await wait_all_tasks_blocked()  # held back: the buffer is past its bound
            scope.cancel()
    turn.finish_now(PromptAnswer.read({"stopReason": "end_turn"}))
    texts: list[str] = []
    await read_all(turn, texts)
    assert texts == ["0", "1"]


async def test_taking_the_buffer_includes_a_held_event_and_releases_its_deliverer() -> None:
    turn = Turn("s", buffer=1)
    released = anyio.Event()

    async def deliver_two() -> None:
        await turn.deliver_update(chunk("0"))
        await turn.deliver_update(chunk("1"))  # held at the bound
        released.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(deliver_two)
        await wait_all_tasks_blocked()
        assert not released.is_set()
        taken = turn.take_buffered()
        with anyio.fail_after(5):
            await released.wait()
    assert [event.raw["content"]["text"] for event in taken] == ["0", "1"]  # type: ignore[union-attr]
    turn.close()


async def test_waiting_quietly_releases_a_held_deliverer_and_drops_the_rest() -> None:
    turn = Turn("s", buffer=1)
    released = anyio.Event()

    async def deliver_held() -> None:
        await turn.deliver_update(chunk("1"))  # held at the bound
        released.set()

    with anyio.fail_after(5):  # a deliverer left waiting would hang the group
        async with anyio.create_task_group() as tg:
            await turn.deliver_update(chunk("0"))  # fills the buffer
            tg.start_soon(deliver_held)
            await wait_all_tasks_blocked()
            assert not released.is_set()
            tg.start_soon(turn.wait_quietly)  # nobody reads from here on: the deliverer goes on
            await wait_all_tasks_blocked()
            assert released.is_set()  # by leaving, not by the turn's end
            await turn.deliver_update(chunk("2"))  # dropped at once, no wait
            turn.finish_now(PromptAnswer.read({"stopReason": "end_turn"}))
    assert turn.take_buffered() == []
    assert [event async for event in turn] == []
    turn.close()
