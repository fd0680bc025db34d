"""The agent's reply text per message, stored with its final state: concatenated chunks, bounded
with the cut marked, the last attempt's reply after a retry, and nothing from a session/load
replay (after an agent restart or a restart of the bridge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_bridge.conversation.transcript import REPLY_LIMIT_BYTES, ReplyText, TurnRecord
from acp_bridge.conversation.usage import CostMeter
from tests.conversation.live import agent, drained, session, stored

pytestmark = pytest.mark.anyio


async def test_each_message_stores_the_agents_text_and_its_stop_reason(tmp_path: Path) -> None:
    async with session(tmp_path, agent(tmp_path)) as (conv, store, _events):
        await conv.send("hello  big   world")
        await conv.send("thought thinking; plan; tool; echo after the tool")
        await conv.send("echo odd; stop max_tokens")
        await drained(conv)
        messages = stored(store)
    assert [(m.state, m.stop_reason) for m in messages] == [
        ("done", "end_turn"),
        ("done", "end_turn"),
        ("done", "max_tokens"),
    ]
    assert [m.reply for m in messages] == ["hello  big   world", "after the tool", "odd"]
    assert not any(m.reply_truncated for m in messages)


async def test_a_reply_past_the_bound_is_cut_and_marked(tmp_path: Path) -> None:
    async with session(tmp_path, agent(tmp_path)) as (conv, store, _events):
        await conv.send(f"huge {REPLY_LIMIT_BYTES + 4096}; echo tail")
        await drained(conv)
        (message,) = stored(store)
    assert message.state == "done" and message.reply_truncated
    assert message.reply is not None
    assert len(message.reply.encode()) == REPLY_LIMIT_BYTES
    assert message.reply.startswith("huge-1:xxx")


async def test_a_retry_keeps_the_last_attempts_reply_and_a_cut_turn_keeps_what_came(
    tmp_path: Path,
) -> None:
    async with session(tmp_path, agent(tmp_path, "slow_agent.py", "--max-wait", "0.2")) as (
        conv,
        store,
        events,
    ):
        await conv.send("echo partial; wait")
        await events.wait_for("update")
        await conv.stop()
        await events.wait_for("turn_ended")
        (cancelled,) = stored(store)
        assert (cancelled.state, cancelled.reply) == ("cancelled", "partial")
        await conv.retry(1)
        await drained(conv)
        (retried,) = stored(store)
    assert (retried.state, retried.reply, retried.attempts) == ("done", "partial", 2)


async def test_replayed_history_adds_nothing_after_an_agent_restart_or_a_bridge_restart(
    tmp_path: Path,
) -> None:
    spec = agent(tmp_path)
    async with session(tmp_path, spec) as (conv, store, events):
        await conv.send("echo first reply")
        await conv.send("echo cut; crash 3")  # the agent restarts and loads the session
        await conv.send("echo third")
        await drained(conv)
        assert [e["how"] for e in events.of("session_restored")] == ["load"]
    async with session(tmp_path, spec) as (conv, store, events):  # the bridge restarts
        await events.wait_for("session")
        await conv.send("echo fourth")
        await drained(conv)
        messages = stored(store)
    assert [e["how"] for e in events.of("session")] == ["load"]
    assert [m.state for m in messages] == ["done", "failed", "done", "done"]
    assert [m.reply for m in messages] == ["first reply", "cut", "third", "fourth"]


# -- the bound, without processes --------------------------------------------------------------


def test_the_cut_falls_on_a_character_boundary_and_later_text_is_dropped() -> None:
    reply = ReplyText(limit=10)
    reply.add("abcd")
    reply.add("éé")  # 4 bytes: 8 in all
    reply.add("😀z")  # 5 bytes: the emoji does not fit whole
    reply.add("more")
    assert (reply.text, reply.size, reply.truncated) == ("abcdéé", 8, True)
    exact = ReplyText(limit=4)
    exact.add("abcd")
    assert (exact.text, exact.truncated) == ("abcd", False)


def test_a_turn_record_takes_text_chunks_only() -> None:
    def chunk(kind: str, content: object) -> dict[str, object]:
        return {"sessionUpdate": kind, "content": content}

    record = TurnRecord(1, CostMeter())
    record.observe("s", chunk("agent_message_chunk", {"type": "text", "text": "a"}))
    record.observe("s", chunk("agent_thought_chunk", {"type": "text", "text": "t"}))
    record.observe("s", chunk("agent_message_chunk", {"type": "image"}))
    record.observe("s", chunk("agent_message_chunk", "garbage"))
    record.observe("s", chunk("user_message_chunk", {"type": "text", "text": "u"}))
    assert record.reply.text == "a"
