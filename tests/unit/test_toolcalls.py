"""ToolCallTracker: every tool call of a turn ends in exactly one terminal state.

The tracker is pure (fed raw ``session/update`` payloads), so these tests drive it directly.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.client.toolcalls import TERMINAL_STATUSES, ToolCallTracker


def opened(tool_call_id: str, status: str | None = "pending") -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "tool_call", "toolCallId": tool_call_id}
    if status is not None:
        update["status"] = status
    return update


def updated(tool_call_id: str, status: str | None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id}
    if status is not None:
        update["status"] = status
    return update


def test_an_open_tool_call_is_closed_by_close_all() -> None:
    tracker = ToolCallTracker()
    assert tracker.observe(opened("a"))
    assert tracker.observe(updated("a", "in_progress"))
    assert tracker.close_all() == ["a"]


def test_a_tool_call_with_a_terminal_status_is_not_closed_again() -> None:
    tracker = ToolCallTracker()
    assert tracker.observe(opened("a"))
    assert tracker.observe(updated("a", "completed"))
    assert tracker.close_all() == []


def test_close_all_closes_only_the_open_ones_in_opening_order() -> None:
    tracker = ToolCallTracker()
    for tool_call_id in ("c", "a", "b", "d"):
        assert tracker.observe(opened(tool_call_id))
    assert tracker.observe(updated("b", "failed"))
    assert tracker.observe(updated("d", "completed"))
    assert tracker.observe(updated("a", "in_progress"))  # still open, keeps its place
    assert tracker.close_all() == ["c", "a"]


def test_a_late_update_for_a_closed_tool_call_is_dropped() -> None:
    tracker = ToolCallTracker()
    tracker.observe(opened("a"))
    assert tracker.close_all() == ["a"]
    # The bridge already reported "a" as failed; the agent's late word must not reach the caller.
    assert not tracker.observe(updated("a", "completed"))
    assert not tracker.observe(updated("a", "in_progress"))
    assert not tracker.observe(updated("a", None))
    assert not tracker.observe(opened("a"))  # reusing the id does not reopen it
    assert tracker.close_all() == []


def test_an_update_after_the_agents_own_terminal_status_is_dropped() -> None:
    tracker = ToolCallTracker()
    tracker.observe(opened("a"))
    assert tracker.observe(updated("a", "completed"))
    assert not tracker.observe(updated("a", "failed"))


def test_a_second_close_all_returns_nothing() -> None:
    tracker = ToolCallTracker()
    tracker.observe(opened("a"))
    tracker.observe(opened("b"))
    assert tracker.close_all() == ["a", "b"]
    assert tracker.close_all() == []


def test_updates_that_are_not_about_a_tool_call_always_pass() -> None:
    tracker = ToolCallTracker()
    tracker.observe(opened("a"))
    tracker.close_all()
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    assert tracker.observe(chunk)
    assert tracker.observe({"sessionUpdate": "tool_call_update", "toolCallId": 7})  # no str id
    assert tracker.close_all() == []


# --- property: exactly one terminal state per id, nothing accepted after it -----------------

IDS = st.sampled_from(["a", "b", "c", "d", "e"])
STATUSES = st.sampled_from(["pending", "in_progress", *sorted(TERMINAL_STATUSES), "weird", None])
RAW_UPDATE = st.builds(
    lambda kind, tool_call_id, status: (
        opened(tool_call_id, status) if kind == "tool_call" else updated(tool_call_id, status)
    ),
    st.sampled_from(["tool_call", "tool_call_update"]),
    IDS,
    STATUSES,
)
STEP = st.one_of(RAW_UPDATE, st.just("close_all"))


@given(st.lists(STEP, max_size=40))
def test_every_tool_call_ends_in_exactly_one_terminal_state(
    steps: list[dict[str, Any] | str],
) -> None:
    tracker = ToolCallTracker()
    terminals: dict[str, int] = {}  # id -> terminal states the caller was shown
    for step in [*steps, "close_all"]:
        if step == "close_all":
            closed = tracker.close_all()
            assert len(closed) == len(set(closed))
            for tool_call_id in closed:
                terminals[tool_call_id] = terminals.get(tool_call_id, 0) + 1
            continue
        assert isinstance(step, dict)
        tool_call_id = step["toolCallId"]
        accepted = tracker.observe(step)
        if tool_call_id in terminals:
            assert not accepted, "an update after the terminal state was accepted"
            continue
        assert accepted, "an update for a tool call still open was dropped"
        if step.get("status") in TERMINAL_STATUSES:
            terminals[tool_call_id] = 1
    seen = {step["toolCallId"] for step in steps if isinstance(step, dict)}
    assert terminals.keys() == seen
    assert all(count == 1 for count in terminals.values())
    assert tracker.close_all() == []
    for tool_call_id in seen:
        for status in ("in_progress", "completed", None):
            assert not tracker.observe(updated(tool_call_id, status))


def test_the_tracker_is_bounded_at_both_ends() -> None:
    tracker = ToolCallTracker(max_open=3, max_closed=4)
    for n in range(6):
        assert tracker.observe({"sessionUpdate": "tool_call", "toolCallId": f"t{n}"})
    assert tracker.close_all() == ["t0", "t1", "t2"]  # past max_open: passed, not tracked
    for n in range(3, 9):
        tracker.observe({"sessionUpdate": "tool_call", "toolCallId": f"c{n}", "status": "failed"})
    # Only the 4 newest closed ids are remembered: the oldest pass again, the newest do not.
    assert tracker.observe({"sessionUpdate": "tool_call_update", "toolCallId": "t0"})
    assert not tracker.observe({"sessionUpdate": "tool_call_update", "toolCallId": "c8"})
