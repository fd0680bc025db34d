"""``acp-bridge store copy SRC DST``: SQLite to PostgreSQL and back, every message in its state
with its reply and usage, the event log in order; idempotent (a conversation already there is
never overwritten); a conversation a live owner holds is skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp_bridge.cli.main import main
from acp_bridge.conversation.records import FinishedTurn
from acp_bridge.conversation.store import QueueStore
from acp_bridge.conversation.store_api import Store
from acp_bridge.conversation.usage import CostMeter, UsageTotals
from acp_bridge.host.owner import ConversationOwner
from acp_bridge.pgstore.store import PgStore
from tests.conversation.stores import AGENT, text


def fill(store: Store, conversation_id: str) -> None:
    """A conversation with a message in each kind of state, events, usage and a steer."""
    store.create_conversation(conversation_id, agent=AGENT, cwd="/work", title="t", now=1.0)
    store.update_conversation(conversation_id, session_id="s-1", now=1.5)
    for n in range(4):
        store.add_message(conversation_id, text(f"m{n}"), now=2.0 + n)
    turn = FinishedTurn("the reply", False, UsageTotals.from_json({"inputTokens": 5}), CostMeter())
    store.mark_running(conversation_id, 1, now=3.0, event=("turn_started", {"seq": 1}))
    store.finish(conversation_id, 1, "done", stop_reason="end_turn", now=4.0, turn=turn)
    store.finish(
        conversation_id,
        2,
        "failed",
        error={"code": "x", "message": "boom", "details": {}},
        recoverable=True,
        now=5.0,
    )
    store.add_message(conversation_id, text("steer"), steering=True, now=6.0)
    store.finish(conversation_id, 5, "steered", now=6.5, steered_into=1)
    store.add_event(conversation_id, "note", {"n": [1, 2]}, seq=3, now=7.0)


def snapshot(store: Store, conversation_id: str) -> tuple[Any, ...]:
    record = store.get_conversation(conversation_id)
    assert record is not None
    events = [(e.ts, e.seq, e.kind, e.data) for e in store.events(conversation_id)]
    return record, store.messages(conversation_id), events


def test_a_copy_to_postgresql_and_back_keeps_everything_and_is_idempotent(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, back = tmp_path / "a.db", tmp_path / "b.db"
    with QueueStore.open(source) as store:
        fill(store, "c1")
        fill(store, "c2")
        before = [snapshot(store, cid) for cid in ("c1", "c2")]
    assert main(["store", "copy", str(source), pg_url]) == 0
    assert "2 conversation(s) copied" in capsys.readouterr().out
    with PgStore.open(pg_url) as store:
        assert [snapshot(store, cid) for cid in ("c1", "c2")] == before
        assert store.latest_conversation() == before[1][0]  # the same order
    assert main(["store", "copy", str(source), pg_url]) == 0  # again: nothing overwritten
    out, err = capsys.readouterr()
    assert "0 conversation(s) copied" in out and "2 there already" in out
    assert "c1 is in" in err and "not overwritten" in err
    assert main(["store", "copy", "--conversation", "c2", pg_url, str(back)]) == 0
    with QueueStore.open(back) as store:
        assert [r.id for r in store.list_conversations()] == ["c2"]
        assert snapshot(store, "c2") == before[1]


def test_a_conversation_owned_by_a_live_process_is_skipped(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "a.db"
    with QueueStore.open(source) as store:
        fill(store, "busy")
        fill(store, "free")
    owner = ConversationOwner(source, "busy")
    owner.acquire()
    try:
        assert main(["store", "copy", str(source), pg_url]) == 1
    finally:
        owner.release()
    out, err = capsys.readouterr()
    assert "1 conversation(s) copied" in out and "skipped busy" in err
    with PgStore.open(pg_url) as store:
        assert [r.id for r in store.list_conversations()] == ["free"]
        assert main(["store", "copy", pg_url, str(tmp_path / "back.db")]) == 0
        store.own("free")  # the copy let go of what it held


def test_prune_on_postgresql_skips_what_a_live_host_owns(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with PgStore.open(pg_url) as store, PgStore.open(pg_url) as other_host:
        fill(store, "old")
        fill(store, "owned")
        fill(store, "new")
        store.update_conversation("new", title="recent", now=10_000_000_000.0)
        for conversation_id in ("old", "owned", "new"):
            store.disown(conversation_id)  # its writes took the leases: let them go
        other_host.own("owned")
        assert main(["prune", "--store", pg_url, "--keep", "1"]) == 0
        out, err = capsys.readouterr()
        assert out.split() == ["old"]
        assert "owned" in err  # skipped, named
        assert sorted(r.id for r in store.list_conversations()) == ["new", "owned"]
