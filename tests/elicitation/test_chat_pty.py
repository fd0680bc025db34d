"""``chat`` asks the agent's elicitations on the prompt line, through the real process on a
pty: a form field by field (typed, defaults, enum choices, asked again when invalid), confirmed,
and the agent echoes what it got; a url is shown with its host and Ctrl-C at it answers cancel
while the turn goes on. Plus the router's pure rules for free-text questions."""

from __future__ import annotations

from pathlib import Path

from acp_bridge.cli.chat_router import ChatRouter, Dismiss, Reply, Send, Stop
from tests.e2e.test_chat import CTRL_C, agent, chat


def test_a_form_is_asked_field_by_field_and_a_url_dismissed_with_ctrl_c(tmp_path: Path) -> None:
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.say("elicit form; echo done")
        terminal.read_until(b"the agent asks: Tell me about yourself")
        terminal.read_until(b"Your name (string, required)")
        terminal.say("Ada")
        terminal.read_until(b"age (integer, default 42) (Enter: the default")
        terminal.say("")
        terminal.read_until(b"color (string, one of red|green|blue, required)")
        terminal.say("purple")
        terminal.read_until(b"'purple' is not one of red|green|blue")
        terminal.say("2")
        terminal.read_until(b"ok (boolean, default yes): go on?")
        terminal.say("n")
        terminal.read_until(b'send {"name": "Ada", "age": 42, "color": "green", "ok": false}?')
        terminal.say("y")
        terminal.read_until(
            b'elicit form accept {"name":"Ada","age":42,"color":"green","ok":false}'
        )
        terminal.read_until(b"done")
        terminal.read_until(b"[done] end_turn")
        terminal.say("elicit url; echo after")
        terminal.read_until(b"the agent asks: Please connect your account")
        terminal.read_until(b"open https://example.com/connect?elicitationId=fake-url-1")
        terminal.read_until(b"(host example.com) yourself? y (accept), n (decline)")
        terminal.type(CTRL_C)
        terminal.read_until(b"elicit url cancel null")
        terminal.read_until(b"after")
        terminal.read_until(b"[done] end_turn")
        terminal.say("/quit")
        assert terminal.finish() == 0
    history = (tmp_path / "state" / "acp-bridge" / "chat_history").read_text().split("\n")
    assert "Ada" not in history and "purple" not in history


def test_a_free_text_question_takes_any_line_and_ctrl_c_dismisses_it() -> None:
    router = ChatRouter()
    router.turn_started()
    router.question_asked(1, free_text=True)
    assert router.line("") == Reply(1, "")
    assert router.line("y") == Reply(1, "y")
    assert router.line("//slash") == Reply(1, "/slash")
    assert router.interrupt() == Dismiss(1)
    router.question_gone(1)
    assert router.line("hello") == Send("hello")
    assert router.interrupt() == Stop()
