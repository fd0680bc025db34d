"""Plain-mode rendering of a turn (issue #8, "readable output"), on in-memory streams."""

from __future__ import annotations

import io
from typing import Any

import pytest

from acp_bridge.cli.render import EventPrinter, wants_color


class Screen(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def update(seq: int, **fields: Any) -> dict[str, Any]:
    return {"event": "update", "seq": seq, "update": fields}


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return update(1, sessionUpdate=kind, content={"type": "text", "text": text})


TURN: list[dict[str, Any]] = [
    {"event": "turn_started", "seq": 1, "text": "hi"},
    chunk("let me think", "agent_thought_chunk"),
    chunk(" more", "agent_thought_chunk"),
    update(1, sessionUpdate="plan", entries=[
        {"content": "read", "status": "completed"},
        {"content": "fix", "status": "in_progress"},
        {"content": "test", "status": "pending"},
    ]),
    update(1, sessionUpdate="tool_call", toolCallId="t1", title="Read a.py", kind="read",
           status="pending"),
    update(1, sessionUpdate="tool_call_update", toolCallId="t1", status="completed"),
    update(1, sessionUpdate="tool_call_update", toolCallId="t1", content=[]),  # no status
    {"event": "permission", "seq": 1, "toolCall": {"toolCallId": "t2", "title": "Run make"},
     "decision": "reject_once"},
    chunk("Hello "),
    chunk("world"),
    {"event": "turn_ended", "seq": 1, "stopReason": "end_turn", "state": "done"},
]  # fmt: skip


def test_on_a_terminal_the_whole_turn_reads_as_one_transcript(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out, err = Screen(), io.StringIO()
    printer = EventPrinter(json_mode=False, agent="a", text=out, notes=err)
    for event in TURN:
        printer.show(event)
    assert out.getvalue() == (
        "[thought] let me think more\n"
        "[plan] 3 steps\n"
        "  [x] read\n"
        "  [>] fix\n"
        "  [ ] test\n"
        "[tool] Read a.py (read) pending\n"
        "[tool] Read a.py completed\n"
        "[permission] Run make: reject_once\n"
        "Hello world\n"
        "[done] end_turn\n"
    )
    assert "hint: permission requests are denied here" in err.getvalue()


def test_into_a_pipe_stdout_holds_the_agent_text_alone() -> None:
    out, err = io.StringIO(), io.StringIO()
    printer = EventPrinter(json_mode=False, agent="a", text=out, notes=err)
    for event in TURN:
        printer.show(event)
    assert out.getvalue() == "Hello world\n"
    assert "[tool] Read a.py completed\n" in err.getvalue()
    assert err.getvalue().rstrip().endswith("[done] end_turn")
    assert "\x1b[" not in err.getvalue()  # not a terminal: no color


def test_color_only_on_a_terminal_and_never_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert wants_color(Screen())
    assert not wants_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color(Screen())
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not wants_color(Screen())
    monkeypatch.setenv("TERM", "xterm")
    out = Screen()
    printer = EventPrinter(json_mode=False, agent="a", text=out, notes=io.StringIO())
    printer.show({"event": "turn_ended", "seq": 1, "stopReason": "end_turn", "state": "done"})
    assert out.getvalue() == "\x1b[32m[done] end_turn\x1b[0m\n"


def test_a_hint_names_the_flag_once_per_capability() -> None:
    err = io.StringIO()
    printer = EventPrinter(json_mode=False, agent="a", text=io.StringIO(), notes=err)
    for method in ("fs/read_text_file", "fs/read_text_file", "terminal/create", "terminal/kill"):
        printer.capability_refused(method)
    assert err.getvalue().count("--allow-fs") == 1
    assert err.getvalue().count("--allow-terminal") == 1


def test_tool_titles_are_remembered_within_a_bound() -> None:
    err = io.StringIO()
    printer = EventPrinter(json_mode=False, agent="a", text=io.StringIO(), notes=err)
    for index in range(1000):
        call = {"toolCallId": f"t{index}", "title": f"T{index}"}
        printer.show(update(1, sessionUpdate="tool_call", **call))
    printer.show(update(1, sessionUpdate="tool_call_update", toolCallId="t999", status="completed"))
    printer.show(update(1, sessionUpdate="tool_call_update", toolCallId="t0", status="completed"))
    assert "[tool] T999 completed" in err.getvalue()
    assert "[tool] t0 completed" in err.getvalue()  # forgotten: the id stands in
    assert len(printer._titles) <= 256


def test_a_turn_that_did_not_end_done_is_marked_and_noted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out, err = Screen(), io.StringIO()
    printer = EventPrinter(json_mode=False, agent="a", text=out, notes=err)
    printer.show(chunk("partial"))
    printer.show({"event": "turn_ended", "seq": 3, "stopReason": "cancelled", "state": "cancelled"})
    assert out.getvalue().startswith("partial\n[cancelled]")
    assert "message 3 ended cancelled" in err.getvalue()
