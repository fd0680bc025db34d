"""Steering through the library (issue 24), against the steering fixture agents: a steer lands
inside the running turn; it falls back to the head of the queue on an agent that advertises no
steering (also one that would answer a probe with ``{}``: no probe is made); a steer racing the
turn's end reaches the agent exactly once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from acp_bridge.conversation.queue_states import MessageState
from tests.conversation.live import Events, drained, session, stored
from tests.steer.helpers import BARE, STEERING, deliveries, logged, spec

pytestmark = pytest.mark.anyio


def _texts(events: Events, seq_from: int, seq_to: int) -> list[str]:
    """The agent's chunks published between ``turn_started`` of ``seq_from`` and the end event
    of ``seq_to``."""
    out: list[str] = []
    inside = False
    for event in events:
        if event["event"] == "turn_started" and event["seq"] == seq_from:
            inside = True
        elif event["event"] in ("turn_ended", "turn_failed") and event["seq"] == seq_to:
            break
        elif inside and event["event"] == "update":
            content = event["update"].get("content") or {}
            out.append(str(content.get("text", "")))
    return out


async def _first_chunk(events: Events) -> None:
    await events.wait_for("update")


async def _started(events: Events, seq: int) -> None:
    """Wait for the ``turn_started`` of message ``seq``."""
    while not [e for e in events.of("turn_started") if e["seq"] == seq]:
        await events.wait_for("turn_started", len(events.of("turn_started")) + 1)


async def test_a_steer_lands_inside_the_running_turn(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    async with session(tmp_path, spec(STEERING, tmp_path, log)) as (conv, store, events):
        first = await conv.send("hello")
        await _first_chunk(events)  # the agent is running the turn
        steer = await conv.send("use the other config file", steer=True)
        await events.wait_for("steered")
        await drained(conv)
        steered = events.of("steered")[0]
        assert steered["seq"] == steer and steered["into"] == first
        assert steered["outcome"] == "injected"
        assert "[steer] use the other config file " in _texts(events, first, first)
        assert not events.of("steer_fallback")
        states = {m.seq: m.state for m in stored(store)}
        assert states == {first: MessageState.DONE, steer: MessageState.STEERED}
        assert [m.state for m in conv.messages()] == [MessageState.DONE, MessageState.STEERED]
    assert deliveries(log, "use the other config file") == 1
    assert logged(log) == [
        "prompt hello",
        "steer use the other config file",
        "steer-injected use the other config file",
    ]


@pytest.mark.parametrize("script", [BARE, "slow_agent.py"])
async def test_a_steer_falls_back_to_the_queue_head_without_advertised_steering(
    tmp_path: Path, script: str
) -> None:
    log = tmp_path / "agent.log"
    async with session(tmp_path, spec(script, tmp_path, log)) as (conv, store, events):
        first = await conv.send("echo working; wait 20")
        await _first_chunk(events)
        queued = await conv.send("echo queued behind")
        steer = await conv.send("echo fix it", steer=True)
        await events.wait_for("steer_fallback")
        fallback = events.of("steer_fallback")[0]
        assert fallback == {**fallback, "seq": steer, "reason": "unsupported"}
        await conv.stop()  # ends the waiting turn; the steer is next, ahead of "queued behind"
        await conv.resume()
        await drained(conv)
        await events.wait_for("turn_started", 3)
        started = [e["seq"] for e in events.of("turn_started")]
        assert started == [first, steer, queued]
        assert {m.seq: m.state for m in stored(store)}[steer] is MessageState.DONE
    if script == BARE:  # it would have answered a probe with {}: none was made
        assert not [line for line in logged(log) if line.startswith("ext ")]
        assert deliveries(log, "echo fix it") == 1


async def test_a_steer_with_no_running_turn_is_queued_and_prompted_once(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    async with session(tmp_path, spec(STEERING, tmp_path, log)) as (conv, _store, events):
        steer = await conv.send("stop 1", steer=True)
        await drained(conv)
        await events.wait_for("turn_started")
        assert events.of("steer_fallback")[0]["reason"] == "no_running_turn"
        assert [e["seq"] for e in events.of("turn_started")] == [steer]
    assert deliveries(log, "stop 1") == 1


async def test_an_agent_failed_answer_puts_the_steer_at_the_queue_head(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    async with session(tmp_path, spec(STEERING, tmp_path, log)) as (conv, store, events):
        first = await conv.send("echo working; steers 1")
        await _first_chunk(events)
        steer = await conv.send("echo please steer-fail", steer=True)
        await events.wait_for("steer_fallback")
        fallback = events.of("steer_fallback")[0]
        assert (fallback["reason"], fallback["outcome"]) == ("failed", "failed")
        assert {m.seq: m.state for m in stored(store)}[steer] is MessageState.QUEUED
        await conv.stop()
        await conv.resume()
        await drained(conv)
        await events.wait_for("turn_started", 2)
        assert [e["seq"] for e in events.of("turn_started")] == [first, steer]
    assert deliveries(log, "echo please steer-fail") == 1


async def test_a_steer_racing_the_turn_end_reaches_the_agent_exactly_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    rounds = 12
    async with session(tmp_path, spec(STEERING, tmp_path, log)) as (conv, store, events):
        steers: list[int] = []
        for i in range(rounds):
            turn = await conv.send("sleep 20")
            await _started(events, turn)
            # Aim around the turn's end (20 ms): early, on it, after it.
            await anyio.sleep((i % 4) * 0.01)
            steers.append(await conv.send(f"echo race {i}", steer=True))
            await drained(conv)
        # Each steer ended steered (joined a turn) or done (prompted as a turn of its own).
        states = {m.seq: m.state for m in conv.messages()}
        assert {states[seq] for seq in steers} <= {MessageState.STEERED, MessageState.DONE}
        assert {m.seq: m.state for m in stored(store)} == states
    for i in range(rounds):
        assert deliveries(log, f"echo race {i}") == 1, logged(log)


async def test_steers_during_the_cancel_grace_window_are_queued_in_order(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    async with session(tmp_path, spec(STEERING, tmp_path, log)) as (conv, _store, events):
        # A turn that ignores the cancel for 300 ms (the grace window is 500 ms).
        first = await conv.send("echo working; on-cancel ignore; wait 0.3")
        await _first_chunk(events)
        await conv.stop()
        one = await conv.send("echo one", steer=True)
        two = await conv.send("echo two", steer=True)
        await events.wait_for("steer_fallback", 2)
        assert [(e["seq"], e["reason"]) for e in events.of("steer_fallback")] == [
            (one, "cancelling"),
            (two, "cancelling"),
        ]
        await drained(conv)  # a send after a stop goes on: the steers are prompted in order
        await events.wait_for("turn_started", 3)
        assert [e["seq"] for e in events.of("turn_started")] == [first, one, two]
    assert [line for line in logged(log) if line.startswith("prompt echo ")][1:] == [
        "prompt echo one",
        "prompt echo two",
    ]


async def test_an_outcome_nobody_knows_counts_as_taken(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    async with session(tmp_path, spec(STEERING, tmp_path, log)) as (conv, store, events):
        first = await conv.send("hello")
        await _first_chunk(events)
        steer = await conv.send("echo steer-odd", steer=True)
        await events.wait_for("steered")
        steered = events.of("steered")[0]
        assert (steered["into"], steered["outcome"]) == (first, "deferredByAgent")
        await drained(conv)
        assert [m.state for m in conv.messages()] == [MessageState.DONE, MessageState.STEERED]
        assert {m.seq: m.state for m in stored(store)}[steer] is MessageState.STEERED
    assert deliveries(log, "echo steer-odd") == 1


async def test_an_unanswered_steer_ends_unconfirmed_and_is_never_prompted(tmp_path: Path) -> None:
    log, hold = tmp_path / "agent.log", tmp_path / "never"
    async with session(tmp_path, spec(STEERING, tmp_path, log, hold)) as (conv, store, events):
        conv.steer_timeout_s = 0.5
        first = await conv.send("echo working; wait 1")
        await _first_chunk(events)
        steer = await conv.send("echo held", steer=True)
        await drained(conv)
        await events.wait_for("turn_failed")
        (failed,) = [e for e in events.of("turn_failed") if e["seq"] == steer]
        assert failed["error"]["message"] == "steer unconfirmed" and failed["recoverable"]
        assert [e["seq"] for e in events.of("turn_started")] == [first]
        message = {m.seq: m for m in stored(store)}[steer]
        assert message.state is MessageState.FAILED and message.attempts == 0
    assert "prompt echo held" not in logged(log)


async def test_the_draft_session_inject_is_used_when_advertised(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    agent = spec(STEERING, tmp_path, log, draft=True)
    async with session(tmp_path, agent) as (conv, _store, events):
        first = await conv.send("hello")
        await _first_chunk(events)
        steer = await conv.send("draft steer", steer=True)
        await events.wait_for("steered")
        assert (events.of("steered")[0]["seq"], events.of("steered")[0]["into"]) == (steer, first)
        await drained(conv)
    assert deliveries(log, "draft steer") == 1


async def test_a_steer_while_the_agent_restarts_is_queued(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    # The restart takes 2 s: the steer is sent well within it. The first start, which nothing
    # here is about, is not delayed (a marker file tells the two apart).
    first = spec(STEERING, tmp_path, log, None)
    delay_after_first = 'if [ -e "$0" ]; then exec "$@" --startup-delay 2; fi; : > "$0"; exec "$@"'
    marker = str(tmp_path / "started-once")
    agent = replace(first, argv=["sh", "-c", delay_after_first, marker, *first.argv])
    async with session(tmp_path, agent) as (conv, _store, events):
        await conv.send("echo going; crash")
        await events.wait_for("agent_exited")
        steer = await conv.send("echo after the crash", steer=True)
        await events.wait_for("steer_fallback")
        assert events.of("steer_fallback")[-1] == {
            **events.of("steer_fallback")[-1],
            "seq": steer,
            "reason": "agent_restarting",
        }
        await drained(conv)
        await _started(events, steer)
    assert deliveries(log, "echo after the crash") == 1
