"""The group commit hands what it committed to the event log to a reader (update_log.py's
CommittedLog): the entries the store holds, with their ids, in order; anything it cannot tell
(another store call, a failed call, too much kept) makes the reader read the store instead.
Real SQLite files."""

from __future__ import annotations

import json
from typing import Any

import pytest

from acp_bridge.conversation.group_commit import GroupCommit
from acp_bridge.conversation.records import EventRecord, UpdateData, dumps
from acp_bridge.conversation.store import QueueStore
from acp_bridge.conversation.update_log import COMMITTED_KEPT, CommittedLog
from acp_bridge.errors import UnknownConversationError
from tests.conversation.stores import text

pytestmark = pytest.mark.anyio


def chunk(i: int) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"é{i}"}}


def fields(entries: list[EventRecord]) -> list[tuple[Any, ...]]:
    return [(e.id, e.conversation_id, e.ts, e.seq, e.kind, e.data) for e in entries]


async def test_the_reader_is_handed_what_the_store_holds_with_its_ids(store: QueueStore) -> None:
    message = store.add_message("c", text("m"), now=2.0)
    commits = GroupCommit(store)
    commits.log.follow()
    assert commits.log.take() is None  # first: read the store from where the reader is
    updates = [("update", UpdateData(message.seq, "s", chunk(i)), message.seq) for i in range(3)]
    await commits.add_events("c", updates, now=3.0)
    ident = await commits.add_event("c", "session", {"how": "new"}, now=4.0)
    handed = commits.log.take()
    assert handed is not None
    assert fields(handed) == fields(store.events("c"))
    assert handed[-1].id == ident
    assert commits.log.take() == []  # taken once


async def test_an_update_is_stored_as_the_plain_dict_would_be_and_keeps_its_text(
    store: QueueStore,
) -> None:
    message = store.add_message("c", text("m"), now=2.0)
    commits = GroupCommit(store)
    data = UpdateData(message.seq, 'sé"s', chunk(1))
    assert data.update_json is None
    await commits.add_events("c", [("update", data, message.seq)], now=3.0)
    plain = json.dumps(dict(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert dumps(data) == plain
    assert data.update_json == dumps(chunk(1))
    (stored,) = store.events("c")
    assert stored.data == dict(data)


async def test_any_other_store_call_makes_the_reader_read_the_store(store: QueueStore) -> None:
    commits = GroupCommit(store)
    commits.log.follow()
    commits.log.take()
    await commits.add_event("c", "session", {}, now=2.0)
    await commits.call(store.add_message, "c", text("m"), now=3.0)  # may have logged: unknown
    await commits.add_event("c", "session", {}, now=4.0)
    assert commits.log.take() is None
    await commits.add_event("c", "session", {}, now=5.0)
    handed = commits.log.take()
    assert handed is not None and [e.ts for e in handed] == [5.0]


async def test_a_failed_call_hands_nothing_and_its_neighbours_are_handed(
    store: QueueStore,
) -> None:
    commits = GroupCommit(store)
    commits.log.follow()
    commits.log.take()
    await commits.add_event("c", "a", {}, now=2.0)
    with pytest.raises(UnknownConversationError):
        await commits.add_event("nope", "b", {}, now=3.0)
    await commits.add_event("c", "c", {}, now=4.0)
    handed = commits.log.take()
    assert handed is not None and [e.kind for e in handed] == ["a", "c"]
    assert fields(handed) == fields(store.events("c"))


async def test_nothing_is_kept_until_a_reader_follows(store: QueueStore) -> None:
    commits = GroupCommit(store)
    await commits.add_event("c", "a", {}, now=2.0)
    assert commits.log.take() is None
    commits.log.follow()
    assert commits.log.take() is None  # what was committed before: in the store


def test_past_its_bound_the_log_keeps_nothing_and_says_read_the_store() -> None:
    log = CommittedLog()
    log.follow()
    log.take()
    entry = EventRecord(id=1, conversation_id="c", ts=1.0, seq=None, kind="a", data={})
    log.committed([entry] * COMMITTED_KEPT)
    log.committed([entry])
    assert log.take() is None
    log.committed([entry])
    assert log.take() == [entry]
    log.read_again()
    assert log.take() is None
