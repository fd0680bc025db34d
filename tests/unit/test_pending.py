"""The pending-request table: pure, so driven with plain callbacks."""

from __future__ import annotations

import pytest

from acp_bridge.errors import ConnectionClosedError
from acp_bridge.rpc.pending import PendingTable
from acp_bridge.wire.jsonrpc import Response


def test_ids_count_up_and_prefixed_ids_are_strings() -> None:
    table = PendingTable()
    assert [table.add("m", lambda: None).id for _ in range(3)] == [1, 2, 3]
    prefixed = PendingTable(id_prefix="acpb-")
    assert prefixed.add("m", lambda: None).id == "acpb-1"


def test_a_response_settles_its_call_once_and_leaves_the_table() -> None:
    woken: list[int] = []
    table = PendingTable()
    call = table.add("initialize", lambda: woken.append(1))
    assert table.resolve(Response(call.id, {"ok": True}, None)) is call
    assert call.response is not None
    assert call.response.result == {"ok": True}
    assert woken == [1]
    assert len(table) == 0
    assert table.resolve(Response(call.id, "again", None)) is None  # duplicate: dropped
    assert call.response.result == {"ok": True}


def test_an_unknown_id_is_not_resolved() -> None:
    table = PendingTable()
    table.add("m", lambda: None)
    assert table.resolve(Response(99, None, None)) is None
    assert len(table) == 1


def test_discard_forgets_a_call_so_a_late_answer_is_dropped() -> None:
    table = PendingTable()
    call = table.add("m", lambda: None)
    table.discard(call.id)
    table.discard(call.id)  # idempotent
    assert table.resolve(Response(call.id, 1, None)) is None
    assert not call.is_settled


def test_fail_all_wakes_everyone_and_refuses_new_calls() -> None:
    woken: list[str] = []
    table = PendingTable()
    calls = [table.add("m", lambda n=n: woken.append(n)) for n in "abc"]  # type: ignore[misc]
    closed = ConnectionClosedError("agent exited")
    assert table.fail_all(closed) == 3
    assert woken == ["a", "b", "c"]
    assert all(call.failure is closed for call in calls)
    assert len(table) == 0
    with pytest.raises(ConnectionClosedError):
        table.add("m", lambda: None)
    assert table.fail_all(ConnectionClosedError("second")) == 0
    assert table.closed_by is closed
    assert "closed" in repr(table)


def test_a_settled_call_ignores_a_later_failure() -> None:
    table = PendingTable()
    call = table.add("m", lambda: None)
    assert call.settle(response=Response(call.id, 1, None))
    assert not call.settle(failure=RuntimeError())
    assert call.failure is None
