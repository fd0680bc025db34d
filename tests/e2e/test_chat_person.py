"""What a person sees in ``chat`` (issue #21 items 22 to 24): the agent's own slash commands,
the scrollback of a turn taller than the terminal, aligned lists. Through the real process on
a pty (the helpers are test_chat's)."""

from __future__ import annotations

import re
from pathlib import Path

from acp_bridge.cli.chat_router import ChatRouter, Say, Send
from tests.e2e.test_chat import agent, chat, messages

COMMANDS = [
    {"name": "tools", "description": "list the tools"},
    {"name": "model", "description": "the agent's own model command"},
    {"name": "flood", "description": "send N chunks", "input": {"hint": "N"}},
]


def test_the_agents_own_commands_are_sent_by_name_and_listed_in_help(tmp_path: Path) -> None:
    with chat(["--", *agent("echo_agent.py", "--commands-update")], tmp_path) as terminal:
        terminal.read_until(b"/help lists the commands")
        terminal.say("hello")  # the agent lists its commands before it answers this
        terminal.read_until(b"[done] end_turn")
        terminal.say("/help")
        terminal.read_until(re.compile(rb"the agent's commands[^\r\n]*\r\n  /echo +echo the text"))
        terminal.read_until(re.compile(rb"  /flood +send N chunks \(input: N\)"))
        terminal.say("/echo via the agent")
        terminal.read_until(b"/echo via the agent")
        terminal.read_until(b"[done] end_turn")
        terminal.say("//plain text")
        terminal.read_until(b"[done] end_turn")
        terminal.say("/bogus")
        terminal.read_until(b"unknown command /bogus; /help lists them")
        terminal.say("/quit")
        assert terminal.finish() == 0
    assert [state for _, state, _ in messages(tmp_path / "s.db")] == ["done"] * 3


def test_routing_of_the_agents_commands() -> None:
    router = ChatRouter(lambda: COMMANDS)
    assert router.line("/tools") == Send("/tools")
    assert router.line("  /flood 10 ") == Send("/flood 10")
    assert router.line("/model") != Send("/model")  # ours wins ...
    assert router.line("//model") == Send("/model")  # ... and // reaches the agent's
    assert router.line("/nope") == Say("unknown command /nope; /help lists them")
    shown = router.line("/help")
    assert isinstance(shown, Say)
    assert "  /tools  list the tools" in shown.text
    assert "  /flood  send N chunks (input: N)" in shown.text
    assert "(//model reaches the agent's /model)" in shown.text
    assert ChatRouter().line("/tools") == Say("unknown command /tools; /help lists them")
