"""What a person sees in ``chat`` (issue #21 items 22 to 24): the agent's own slash commands,
the scrollback of a turn taller than the terminal, aligned lists. Through the real process on
a pty (the helpers are test_chat's)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from acp_bridge.cli.chat_router import ChatRouter, Say, Send
from tests.e2e.test_chat import agent, chat, messages

ROOT = Path(__file__).resolve().parents[2]
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


class Tmux:
    """The chat in a tmux window of a given size, on a private tmux server: what the person
    sees, scrollback included (``capture-pane -S -``)."""

    def __init__(self, tmp: Path, args: list[str], width: int, height: int) -> None:
        self.socket = str(tmp / "tmux.sock")
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "XDG_STATE_HOME": str(tmp / "state"),
            "NO_COLOR": "1",
        }
        command = [sys.executable, "-m", "acp_bridge", "chat", "--store", str(tmp / "s.db"), *args]
        self.tmux(
            "new-session", "-d", "-x", str(width), "-y", str(height), "-c", str(tmp),
            *(f"-e{key}={value}" for key, value in env.items()),
            shlex.join(command),
        )  # fmt: skip
        self.tmux("set-option", "-g", "history-limit", "100000")
        self.tmux("set-option", "-g", "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=True
        ).stdout

    def history(self) -> str:
        """Scrollback and screen, wrapped lines joined."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-")

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while text not in (shown := self.history()):
            assert time.monotonic() < deadline, f"never saw {text!r}: {shown[-1500:]!r}"
            time.sleep(0.05)  # polling the pane: tmux has no event to wait on
        return shown

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-l", line)
        self.tmux("send-keys", "Enter")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
@pytest.mark.parametrize("narrow", [False, True])
def test_an_answer_taller_than_the_terminal_is_in_the_scrollback_once(
    tmp_path: Path, narrow: bool
) -> None:
    window = Tmux(tmp_path, ["--", *agent("echo_agent.py")], 60, 10)
    try:
        window.wait_for("/help lists the commands")
        window.type("trickle 120 2")
        if narrow:
            window.wait_for("trickle-1-40 ")
            window.tmux("resize-window", "-x", "40", "-y", "10")
        shown = window.wait_for("[done] end_turn")
        for chunk in ("trickle-1-0 ", "trickle-1-50 ", "trickle-1-119 "):
            assert shown.count(chunk) == 1, shown
        window.type("/quit")
    finally:
        window.close()
