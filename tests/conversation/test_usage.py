"""Usage accounting against real fixture agents: tokens from prompt responses, cost by growth of
the session's cumulative cost, context as the latest snapshot; nothing counted twice across a
cancel, an agent restart, a restart of the bridge and a session/load replay; on both stores
(SQLite, PostgreSQL: the ``store_url`` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_bridge.conversation.usage import CostMeter, TurnUsage, UsageTotals
from tests.conversation.live import agent, drained, session, stored

pytestmark = pytest.mark.anyio

ANSWER = {"inputTokens": 10, "outputTokens": 20, "totalTokens": 30}


async def test_each_message_and_the_conversation_add_up_what_the_agent_reported(
    tmp_path: Path, store_url: str | None
) -> None:
    async with session(tmp_path, agent(tmp_path), store_url) as (conv, store, events):
        await conv.send("usage 100 1000 0.5; tokens 10 20; echo one")
        await conv.send("usage 150 1000 0.75; tokens 5 5 2; echo two")
        await drained(conv)
        first, second = stored(store)
        assert conv.usage == store.get_conversation(conv.id).usage  # type: ignore[union-attr]
    assert first.usage == UsageTotals(ANSWER, {"USD": 0.5}, {"used": 100, "size": 1000})
    assert second.usage.tokens == {
        "inputTokens": 5,
        "outputTokens": 5,
        "thoughtTokens": 2,
        "totalTokens": 12,
    }
    assert second.usage.cost == {"USD": 0.25}  # growth of the cumulative cost, not 0.75
    assert conv.usage.tokens["totalTokens"] == 42
    assert conv.usage.cost == {"USD": 0.75}
    assert conv.usage.context == {"used": 150, "size": 1000}  # the latest snapshot
    ended = events.of("turn_ended")
    assert [e["usage"] for e in ended] == [first.usage.to_json(), second.usage.to_json()]


async def test_a_cancelled_turn_counts_its_answer_once_and_a_repeated_snapshot_adds_nothing(
    tmp_path: Path, store_url: str | None
) -> None:
    async with session(tmp_path, agent(tmp_path, "slow_agent.py"), store_url) as (
        conv,
        store,
        events,
    ):
        await conv.send("tokens 7 3; usage 50 1000 0.1; wait")
        await events.wait_for("update")
        await conv.stop()
        await events.wait_for("turn_ended")
        await conv.resume()
        await conv.send("usage 60 1000 0.1; echo after")
        await drained(conv)
        cancelled, after = stored(store)
    assert cancelled.state == "cancelled"
    assert cancelled.usage == UsageTotals(
        {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10},
        {"USD": 0.1},
        {"used": 50, "size": 1000},
    )
    assert after.usage.cost == {"USD": 0.0}
    assert conv.usage.tokens["totalTokens"] == 10
    assert conv.usage.cost == {"USD": 0.1}


async def test_an_agent_restart_with_a_replayed_usage_snapshot_counts_nothing_twice(
    tmp_path: Path, store_url: str | None
) -> None:
    async with session(tmp_path, agent(tmp_path), store_url) as (conv, store, events):
        await conv.send("usage 100 1000 0.5; tokens 10 20; echo spent; crash 3")
        await conv.send("usage 130 1000 0.7; tokens 1 1; echo ok")
        await drained(conv)
        crashed, ok = stored(store)
        assert [e["how"] for e in events.of("session_restored")] == ["load"]
    assert crashed.state == "failed"
    assert crashed.usage.cost == {"USD": 0.5}  # what it spent before the crash
    assert "tokens" not in crashed.usage.to_json()  # no answer, nothing reported
    assert ok.usage.cost == pytest.approx({"USD": 0.2})
    assert conv.usage.cost == pytest.approx({"USD": 0.7})
    assert conv.usage.tokens["totalTokens"] == 2


async def test_a_restarted_bridge_continues_the_totals_and_the_load_replay_adds_nothing(
    tmp_path: Path, store_url: str | None
) -> None:
    spec = agent(tmp_path)
    async with session(tmp_path, spec, store_url) as (conv, _store, _events):
        await conv.send("usage 100 1000 0.5; tokens 10 20; echo first")
        await drained(conv)
    async with session(tmp_path, spec, store_url) as (conv, store, events):
        await events.wait_for("session")
        assert [e["how"] for e in events.of("session")] == ["load"]
        assert conv.usage.cost == {"USD": 0.5}  # read back, the replayed snapshot not added
        assert conv.usage.tokens == ANSWER
        await conv.send("usage 120 1000 0.6; tokens 1 1; echo second")
        await drained(conv)
        first, second = stored(store)
        total = store.get_conversation(conv.id)
    assert first.usage.cost == {"USD": 0.5}
    assert second.usage.cost == pytest.approx({"USD": 0.1})
    assert total is not None and total.usage == conv.usage
    assert conv.usage.cost == pytest.approx({"USD": 0.6})
    assert conv.usage.tokens["totalTokens"] == 32


# -- the rules, without processes -------------------------------------------------------------


def test_cost_counts_growth_restarts_from_a_reset_counter_and_from_zero_in_a_new_session() -> None:
    meter = CostMeter()
    meter, growth = meter.observe("s1", "USD", 0.5)
    assert growth == 0.5
    meter, growth = meter.observe("s1", "USD", 0.5)
    assert growth == 0.0  # a repeated snapshot
    meter, growth = meter.observe("s1", "USD", 0.2)
    assert growth == 0.2  # the counter restarted: count all of it
    meter, growth = meter.observe("s2", "USD", 0.3)
    assert growth == 0.3  # a new session starts from zero
    meter, growth = meter.observe("s2", "EUR", 1.0)
    assert growth == 1.0 and meter.last == {"USD": 0.3, "EUR": 1.0}
    assert CostMeter.from_json(meter.to_json()) == meter


def test_malformed_reports_are_ignored_and_usage_round_trips() -> None:
    turn = TurnUsage(CostMeter())
    turn.observe_update("s", {"used": -1, "size": 10, "cost": {"amount": "lots"}})
    turn.observe_update("s", {"used": 5, "size": 10, "cost": {"amount": 1.5}})  # no currency
    turn.observe_answer({"inputTokens": True, "outputTokens": 4, "totalTokens": 4.5})
    turn.observe_answer(None)
    spent = turn.result()
    assert spent == UsageTotals({"outputTokens": 4}, {}, {"used": 5, "size": 10})
    assert UsageTotals.from_json(spent.to_json()) == spent
    assert UsageTotals.from_json("garbage") == UsageTotals()
    assert UsageTotals().summary() == "no usage reported"
    line = UsageTotals(ANSWER, {"USD": 0.25}, {"used": 5, "size": 10}).summary()
    assert line == "tokens 10 in, 20 out, 30 total; cost 0.2500 USD; context 5 of 10"
