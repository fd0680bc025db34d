"""The event log holds every update of every turn, so nothing reads it whole on the way to a
turn: ``run --conversation ID`` after a few 50,000-chunk turns peaked at 150, 267 then 379 MB
(the soak's run-peak check found it), reading the whole log to look for tool calls of MCP
servers that had not even been removed."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from acp_bridge.conversation.reconcile import reconcile, servers_used
from acp_bridge.conversation.store_api import Store, iter_events


def _fill(store: Store, count: int) -> None:
    entries = [("update", {"n": n}, None) for n in range(count)]
    store.add_events("c", entries, now=2.0)


def test_iter_events_reads_the_whole_log_in_order_a_page_at_a_time(any_store: Store) -> None:
    _fill(any_store, 2_500)
    pages: list[int] = []
    read = any_store.events

    class Counting:
        def events(self, conversation_id: str, after_id: int = 0, limit: int | None = None) -> Any:
            found = read(conversation_id, after_id, limit)
            pages.append(len(found))
            return found

    entries = list(iter_events(Counting(), "c", page=1_000))  # type: ignore[arg-type]
    assert [e.data["n"] for e in entries] == list(range(2_500))
    assert pages == [1_000, 1_000, 500]


def test_iter_events_reads_nothing_until_asked(any_store: Store) -> None:
    calls: list[int] = []

    class Refusing:
        def events(self, *args: Any) -> Any:
            calls.append(1)
            raise AssertionError("read")

    iter_events(Refusing(), "c")  # type: ignore[arg-type]
    assert calls == []


def _never() -> Iterator[Any]:
    raise AssertionError("the history was read")
    yield  # pragma: no cover


def test_no_removed_server_means_the_history_is_not_read() -> None:
    assert servers_used(set(), _never()) == set()

    stored = SimpleNamespace(id="c", cwd="/work", mcp_servers=[{"name": "files"}])
    reconcile(stored, cwd="/work", mcp_servers=[{"name": "files"}], history=_never())


@pytest.mark.parametrize("removed", [{"files"}])
def test_a_removed_server_is_still_found_in_a_paged_history(
    any_store: Store, removed: set[str]
) -> None:
    _fill(any_store, 1_200)
    any_store.add_events(
        "c", [("tool_call_closed", {"toolCall": {"title": "files/read"}}, None)], now=3.0
    )
    assert servers_used(removed, iter_events(any_store, "c", page=500)) == {"files"}
