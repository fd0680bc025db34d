"""Steering through the library (issue 24), against the steering fixture agents: a steer lands
inside the running turn; it falls back to the head of the queue on an agent that advertises no
steering (also one that would answer a probe with ``{}``: no probe is made); a steer racing the
turn's end reaches the agent exactly once."""

from __future__ import annotations

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
        assert [e["seq"] for e in events.of("turn_started")] == [first, steer]
    assert deliveries(log, "echo please steer-fail") == 1


async def test_a_steer_racing_the_turn_end_reaches_the_agent_exactly_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "agent.log"
    rounds = 12
    async with session(tmp_path, spec(STEERING, tmp_path, log)) as (conv, store, events):
        for i in range(rounds):
            await conv.send("sleep 20")
            await events.wait_for("turn_started", i + 1 + len(events.of("steer_fallback")))
            # Aim around the turn's end (20 ms): early, on it, after it.
            await anyio.sleep((i % 4) * 0.01)
            await conv.send(f"echo race {i}", steer=True)
            await drained(conv)
        steered = {e["seq"] for e in events.of("steered")}
        fell_back = {e["seq"] for e in events.of("steer_fallback")}
        assert not steered & fell_back
        assert len(steered) + len(fell_back) == rounds
        for message in stored(store):
            assert message.state in (MessageState.DONE, MessageState.STEERED), message
    for i in range(rounds):
        assert deliveries(log, f"echo race {i}") == 1, logged(log)
