"""`acp-bridge chat` through the real process on a pty that is its controlling terminal (#8 add 3):
streaming, queueing, permission questions, Ctrl-C, /mode and /model, /retry, /quit. Plus the
pure input routing (chat_router). Every wait is on what the terminal shows, the store, or the
agent's connect-back socket."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import re
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_bridge.cli.chat_router import (
    Answer,
    Cancel,
    ChatRouter,
    ChooseModel,
    Quit,
    QuitNow,
    Retry,
    Say,
    Send,
    Stop,
)
from acp_bridge.cli.chat_screen import PARTIAL_MAX, ChatScreen

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
BRIDGE = [sys.executable, "-m", "acp_bridge", "chat"]
CTRL_C = b"\x03"
CTRL_D = b"\x04"


def agent(script: str, *flags: str) -> list[str]:
    return [sys.executable, "-u", str(AGENTS / script), "--quiet", *flags]


class Terminal:
    """The chat on a pty that is its controlling terminal, as in an interactive shell."""

    def __init__(self, args: list[str], tmp: Path) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, b"\x18\x00\x78\x00\x00\x00\x00\x00")  # 24x120

        def become_terminal_session() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "XDG_STATE_HOME": str(tmp / "state"),
            "NO_COLOR": "1",
        }
        self.process = subprocess.Popen(
            [*BRIDGE, "--store", str(tmp / "s.db"), *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=tmp,
            env=env,
            preexec_fn=become_terminal_session,
        )
        os.close(slave)
        self.seen = b""
        self.mark = 0  # read_until looks from here on

    def read_until(self, text: bytes | re.Pattern[bytes], timeout: float = 20) -> bytes:
        """Wait until the terminal shows ``text`` after the mark; move the mark past it."""
        deadline = time.monotonic() + timeout
        while True:
            found = self._find(text)
            if found is not None:
                self.mark = found
                return self.seen
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {text!r}; the terminal showed {self.seen[-1500:]!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the chat closed the terminal
                    chunk = b""
                assert chunk, f"the terminal closed before {text!r}: {self.seen[-1500:]!r}"
                self.seen += chunk

    def _find(self, text: bytes | re.Pattern[bytes]) -> int | None:
        if isinstance(text, bytes):
            at = self.seen.find(text, self.mark)
            return None if at < 0 else at + len(text)
        match = text.search(self.seen, self.mark)
        return None if match is None else match.end()

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def drain(self) -> None:
        """Take what the terminal shows by now, without waiting."""
        while select.select([self.master], [], [], 0)[0]:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: the chat closed the terminal
                return
            if not chunk:
                return
            self.seen += chunk

    def say(self, line: str) -> None:
        """Type ``line`` at the prompt once readline shows it."""
        self.read_until(b"> ")
        self.type(line.encode() + b"\r")

    def finish(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"the chat did not exit: {self.seen[-1500:]!r}"
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):
                    self.seen += os.read(self.master, 4096)
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


@contextlib.contextmanager
def chat(args: list[str], tmp: Path) -> Iterator[Terminal]:
    terminal = Terminal(args, tmp)
    try:
        yield terminal
    finally:
        terminal.close()


class ConnectBack:
    """The agent connects here at start and holds the socket until it dies."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.peer: socket.socket | None = None

    def flag(self) -> list[str]:
        return ["--connect-back", str(self.port)]

    def wait_alive(self, timeout: float = 20) -> None:
        self.server.settimeout(timeout)
        self.peer, _ = self.server.accept()
        self.peer.settimeout(timeout)
        assert self.peer.recv(64).startswith(b"alive ")

    def wait_dead(self, timeout: float = 10) -> None:
        assert self.peer is not None
        self.peer.settimeout(timeout)
        while self.peer.recv(64):
            pass  # EOF: the agent process is gone (the socket is not inherited by anyone)

    def close(self) -> None:
        if self.peer is not None:
            self.peer.close()
        self.server.close()


def messages(store: Path) -> list[tuple[int, str, int]]:
    with contextlib.closing(sqlite3.connect(store)) as db:
        return list(db.execute("SELECT seq, state, attempts FROM messages ORDER BY seq"))


# -- the real process -----------------------------------------------------------------------------


def test_an_answer_streams_and_quit_leaves(tmp_path: Path) -> None:
    back = ConnectBack()
    try:
        with chat(["--", *agent("echo_agent.py", *back.flag())], tmp_path) as terminal:
            back.wait_alive()
            terminal.read_until(b"/help lists the commands")
            terminal.say("trickle 3 20")
            terminal.read_until(b"trickle-1-0 ")
            terminal.read_until(b"trickle-1-0 trickle-1-1 trickle-1-2 \r\n")  # finished line
            terminal.read_until(b"[done] end_turn")
            terminal.say("/quit")
            assert terminal.finish() == 0
            back.wait_dead()
    finally:
        back.close()
    assert messages(tmp_path / "s.db") == [(1, "done", 1)]
    history = tmp_path / "state" / "acp-bridge" / "chat_history"
    assert "trickle 3 20" in history.read_text()
    assert history.stat().st_mode & 0o777 == 0o600


def test_lines_typed_during_a_turn_are_queued_with_the_depth_shown(tmp_path: Path) -> None:
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.say("echo begun; wait")
        terminal.read_until(b"begun\r\n")  # the answer (the typed line says "begun;")
        terminal.say("trickle 1 1")
        terminal.read_until(b"queued as message 2 (1 waiting)")
        terminal.say("trickle 1 1")
        terminal.read_until(b"queued as message 3 (2 waiting)")
        terminal.say("/cancel")
        terminal.read_until(b"message 1 ended cancelled")
        terminal.read_until(b"trickle-2-0")  # the queue went on: messages 2 and 3
        terminal.read_until(b"trickle-3-0")
        terminal.read_until(b"[done] end_turn")
        terminal.type(CTRL_D)
        assert terminal.finish() == 0
    assert messages(tmp_path / "s.db") == [(1, "cancelled", 1), (2, "done", 1), (3, "done", 1)]


def test_stop_pauses_the_queue_until_resume(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.say("echo begun; wait")
        terminal.read_until(b"begun\r\n")
        terminal.say("trickle 1 1")
        terminal.read_until(b"queued as message 2 (1 waiting)")
        terminal.say("/stop")
        terminal.read_until(b"the queue is paused; 1 queued message kept: /resume sends them")
        terminal.read_until(b"message 1 ended cancelled")
        assert messages(store) == [(1, "cancelled", 1), (2, "queued", 0)]
        terminal.say("/resume")
        terminal.read_until(b"trickle-2-0")
        terminal.read_until(b"[done] end_turn")
        terminal.type(CTRL_D)
        assert terminal.finish() == 0
    assert messages(store) == [(1, "cancelled", 1), (2, "done", 1)]


def test_text_being_typed_survives_the_output_streaming_above_it(tmp_path: Path) -> None:
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.say("trickle 5 100")
        terminal.read_until(b"trickle-1-0 ")
        terminal.type(b"half a ")  # no Enter yet: the chunks keep coming above it
        terminal.read_until(b"trickle-1-2 ")
        terminal.read_until(b"> half a ")  # the prompt line drawn again, with what was typed
        terminal.type(b"line\r")
        terminal.read_until(b"queued as message 2 (1 waiting)")
        terminal.read_until(b"[done] end_turn")
        terminal.read_until(b"half a line\r\n")  # message 2 echoed back by the agent
        terminal.type(CTRL_D)
        assert terminal.finish() == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        (content,) = db.execute("SELECT content FROM messages WHERE seq = 2").fetchone()
    assert "half a line" in content


def test_typing_key_by_key_through_a_fast_stream_keeps_the_chat_alive(tmp_path: Path) -> None:
    # Each chunk redraws the line being typed from the event loop's thread. That used to read
    # readline's buffer while the input thread edited it, and glibc aborted the process
    # ("mbsrtowcs_l.c: Assertion ... failed") now and then; keys typed one by one during a
    # stream of 1 ms chunks made it likely.
    typed = "".join(chr(ord("a") + n % 26) for n in range(160))
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.say("trickle 400 1")
        terminal.read_until(b"trickle-1-0 ")
        for key in typed:
            terminal.type(key.encode())
            terminal.drain()
        terminal.type(b"\r")
        terminal.read_until(b"[done] end_turn")
        terminal.read_until(typed.encode() + b"\r\n")  # message 2, echoed back whole
        terminal.type(CTRL_D)
        assert terminal.finish() == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        (content,) = db.execute("SELECT content FROM messages WHERE seq = 2").fetchone()
    assert typed in content


def test_line_editing_keys_history_and_non_ascii_text_work_on_the_prompt(tmp_path: Path) -> None:
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.say("héllo wörld")
        terminal.read_until("héllo wörld\r\n".encode())  # echoed back by the agent
        terminal.read_until(b"[done] end_turn")
        terminal.read_until(b"> ")
        terminal.type(b"\x1b[A")  # Up: the line before, from the history
        terminal.type(b"\x1b[D\x1b[D\x7f!\r")  # Left twice, Backspace, "!": "héllo wö!ld"
        terminal.read_until("héllo wö!ld\r\n".encode())
        terminal.read_until(b"[done] end_turn")
        terminal.type(CTRL_D)
        assert terminal.finish() == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        contents = [row[0] for row in db.execute("SELECT content FROM messages ORDER BY seq")]
    assert "héllo wörld" in contents[0] and "héllo wö!ld" in contents[1]


def test_a_long_line_typed_after_the_terminal_narrowed_is_sent_whole(tmp_path: Path) -> None:
    typed = "word " * 30  # 150 columns: wraps on the 40-column terminal
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.read_until(b"> ")
        fcntl.ioctl(terminal.master, termios.TIOCSWINSZ, b"\x18\x00\x28\x00\x00\x00\x00\x00")
        terminal.process.send_signal(signal.SIGWINCH)
        for key in typed.strip():
            terminal.type(key.encode())
        terminal.type(b"\r")
        terminal.read_until(b"[done] end_turn")
        terminal.type(CTRL_D)
        assert terminal.finish() == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        (content,) = db.execute("SELECT content FROM messages WHERE seq = 1").fetchone()
    assert typed.strip() in content


def test_a_permission_request_is_asked_on_the_prompt_line(tmp_path: Path) -> None:
    with chat(["--", *agent("permission_agent.py")], tmp_path) as terminal:
        terminal.say("go")
        terminal.read_until(b"y (allow once), n (reject), a (always allow)?")
        terminal.say("maybe")  # not an answer: asked again
        terminal.read_until(b"answer y (allow once), n (reject) or a (always allow)")
        terminal.say("y")
        terminal.read_until(b"permission selected ")
        terminal.read_until(b"allow_once")
        terminal.say("go")
        terminal.read_until(b"(always allow)?")
        terminal.say("a")
        terminal.read_until(b"allow_always")
        terminal.say("go")
        terminal.read_until(b"(always allow)?")
        terminal.say("n")
        terminal.read_until(b"reject_once")
        terminal.say("/quit")
        assert terminal.finish() == 0
    history = (tmp_path / "state" / "acp-bridge" / "chat_history").read_text().split("\n")
    assert "go" in history and "y" not in history and "maybe" not in history


def test_ctrl_c_cancels_the_turn_retry_sends_it_again_and_ctrl_c_at_the_prompt_leaves(
    tmp_path: Path,
) -> None:
    back = ConnectBack()
    store = tmp_path / "s.db"
    try:
        with chat(["--", *agent("echo_agent.py", *back.flag())], tmp_path) as terminal:
            back.wait_alive()
            terminal.say("echo begun; wait")
            terminal.read_until(b"begun\r\n")  # the answer (the typed line says "begun;")
            terminal.type(CTRL_C)
            terminal.read_until(b"cancelling message 1")
            terminal.read_until(b"message 1 ended cancelled")
            assert messages(store) == [(1, "cancelled", 1)]  # recorded before it is shown
            terminal.say("/retry 1")
            terminal.read_until(b"message 1 queued again")
            terminal.read_until(b"begun\r\n")  # the same message, prompted again
            terminal.type(CTRL_C)
            terminal.read_until(b"message 1 ended cancelled")
            terminal.read_until(b"> ")
            terminal.type(CTRL_C)  # at an idle prompt: leave
            assert terminal.finish() == 0
            back.wait_dead()
    finally:
        back.close()
    assert messages(store) == [(1, "cancelled", 2)]


def test_a_second_ctrl_c_during_the_cancel_leaves_with_the_turn_recorded_cancelled(
    tmp_path: Path,
) -> None:
    """The agent ignores the cancel: the second Ctrl-C leaves once the grace window closed
    the turn (recorded cancelled), and the agent's tree is stopped."""
    back = ConnectBack()
    store = tmp_path / "s.db"
    try:
        stubborn = agent("stubborn_agent.py", *back.flag())
        with chat(["--grace", "0.5", "--", *stubborn], tmp_path) as terminal:
            back.wait_alive()
            terminal.say("hello")
            terminal.read_until(b"working")  # the status line: the turn runs
            terminal.type(CTRL_C)
            terminal.read_until(b"cancelling message 1")
            terminal.type(CTRL_C)
            assert terminal.finish() == 130
            back.wait_dead()
    finally:
        back.close()
    assert messages(store) == [(1, "cancelled", 1)]


def test_sigterm_leaves_the_queue_for_resume(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with chat(["--", *agent("echo_agent.py")], tmp_path) as terminal:
        terminal.say("echo begun; wait")
        terminal.read_until(b"begun\r\n")
        terminal.say("trickle 1 1")
        terminal.read_until(b"queued as message 2 (1 waiting)")
        terminal.process.send_signal(signal.SIGTERM)
        assert terminal.finish() == 130
    assert messages(store) == [(1, "cancelled", 1), (2, "queued", 0)]
    with chat(["--resume"], tmp_path) as terminal:  # the stored agent command
        terminal.read_until(b"trickle-1-0")  # message 2, the new agent's first turn
        terminal.read_until(b"[done] end_turn")
        terminal.type(CTRL_D)
        assert terminal.finish() == 0
    assert messages(store) == [(1, "cancelled", 1), (2, "done", 1)]


def test_an_agent_that_cannot_start_is_one_sentence_and_exit_3(tmp_path: Path) -> None:
    with chat(["--", sys.executable, "-c", "print(1)"], tmp_path) as terminal:
        assert terminal.finish() == 3
        terminal.read_until(b"which is not a JSON-RPC message")
        assert b"Traceback" not in terminal.seen


def test_ctrl_c_while_the_agent_starts_leaves_at_once(tmp_path: Path) -> None:
    back = ConnectBack()
    try:
        slow_start = agent("echo_agent.py", *back.flag(), "--hang-on", "initialize")
        with chat(["--", *slow_start], tmp_path) as terminal:
            back.wait_alive()
            terminal.type(CTRL_C)
            assert terminal.finish(timeout=10) == 130
            back.wait_dead()
            assert b"Traceback" not in terminal.seen
    finally:
        back.close()


def test_mode_and_model_list_and_choose_what_the_agent_offers(tmp_path: Path) -> None:
    with chat(["--", *agent("echo_agent.py", "--settings")], tmp_path) as terminal:
        terminal.say("/mode")
        terminal.read_until(re.compile(rb"modes:\r\n \* ask +Ask\r\n   code +Code"))
        terminal.say("/model")
        terminal.read_until(re.compile(rb"models:\r\n \* small +Small\r\n   large +Large"))
        terminal.say("/model huge")
        terminal.read_until(b"the agent offers no model 'huge'; it offers small, large")
        terminal.say("/model large")
        terminal.read_until(b"model: large")
        terminal.say("/mode code")
        terminal.read_until(b"mode: code")
        terminal.say("settings")
        terminal.read_until(b"settings mode=code model=large")
        terminal.say("/mode bogus")
        terminal.read_until(b"offers no mode 'bogus'")
        terminal.say("/bogus")
        terminal.read_until(b"unknown command /bogus; /help lists them")
        terminal.say("/quit")
        assert terminal.finish() == 0


def test_chat_needs_a_terminal(tmp_path: Path) -> None:
    result = subprocess.run(
        [*BRIDGE, "--store", str(tmp_path / "s.db"), "--", *agent("echo_agent.py")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
    )
    assert result.returncode == 2
    assert "stdin is not a terminal" in result.stderr
    assert "Traceback" not in result.stderr


# -- the input routing (pure) ---------------------------------------------------------------------


def test_routing_of_lines_commands_and_answers() -> None:
    router = ChatRouter()
    assert router.line("hello") == Send("hello")
    assert router.line("   ") is None
    assert router.line("//etc/passwd") == Send("/etc/passwd")
    assert router.line("/cancel") == Say("no turn is running")
    assert router.line("/retry x") == Say(
        "usage: /retry N (a message number, as shown when it was queued)"
    )
    assert router.line("/retry 3") == Retry(3)
    assert router.line("/model large") == ChooseModel("large")
    router.turn_started()
    router.question_asked(7)
    router.question_asked(8)
    assert router.line("y") == Answer(7, "allow_once")  # the oldest question first
    assert router.line("/cancel") == Cancel()  # commands still work while asked
    router.question_gone(7)
    assert router.line("always") == Answer(8, "allow_always")
    assert isinstance(router.line("what?"), Say)
    router.question_gone(8)
    assert router.line("n") == Send("n")


def test_routing_of_interrupts() -> None:
    router = ChatRouter()
    router.turn_started()
    assert router.interrupt() == Stop()  # first: cancel the turn
    assert router.interrupt() == Quit(interrupted=True)  # second, while cancelling: leave
    assert router.interrupt() == QuitNow()  # third: now
    idle = ChatRouter()
    assert idle.interrupt() == Quit(interrupted=False)  # at an idle prompt: leave
    ended = ChatRouter()
    ended.turn_started()
    assert ended.interrupt() == Stop()
    ended.turn_ended()
    assert ended.interrupt() == Quit(interrupted=False)
    terminated = ChatRouter()
    assert terminated.terminate() == Quit(interrupted=True)
    assert terminated.terminate() == QuitNow()
    assert ChatRouter().end_of_input() == Quit(interrupted=False)


@pytest.mark.parametrize("answer", ["Y", "yes", " no ", "A"])
def test_answers_are_case_and_space_blind(answer: str) -> None:
    router = ChatRouter()
    router.question_asked(1)
    assert isinstance(router.line(answer), Answer)


# -- the screen (pure drawing, on a stand-in terminal) -------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_footer_is_erased_written_above_and_drawn_again() -> None:
    out, err = FakeTerminal(), FakeTerminal()
    typed = "abc"
    screen = ChatScreen(out, err, line_buffer=lambda: typed, columns=lambda: 20)
    screen.prompt_shown("> ")
    screen.write("out", "partial")  # unfinished: shown in the footer, above the prompt line
    assert out.getvalue().endswith("\r\x1b[Jpartial\n> abc")
    screen.set_status("working 1 s")
    assert err.getvalue() == "working 1 s\x1b[K\n"
    out.truncate(0)
    out.seek(0)
    screen.write("out", " line\nnext")  # one finished line goes above; "next" stays
    # up 2 rows (the partial line and the status) to the footer's top, clear, write, redraw
    assert out.getvalue().startswith("\r\x1b[2A\x1b[Jpartial line\nnext\n")
    assert out.getvalue().endswith("> abc")
    typed = "x" * 25  # the prompt line wraps: 27 columns on a 20-column terminal = 2 rows
    out.truncate(0)
    out.seek(0)
    screen.set_status("")
    assert out.getvalue().startswith("\r\x1b[3A\x1b[J")  # 2 footer rows + 1 wrapped row


def test_an_unfinished_line_is_bounded() -> None:
    out = FakeTerminal()
    screen = ChatScreen(out, FakeTerminal(), columns=lambda: 80)
    screen.write("out", "y" * (PARTIAL_MAX + 1))
    assert "y" * (PARTIAL_MAX + 1) + "\n" in out.getvalue()  # written out as a finished line
    screen.close()
    assert out.getvalue().endswith("\r\x1b[J")  # nothing was left to write out


def test_off_a_terminal_writes_go_straight_through() -> None:
    out, err = io.StringIO(), io.StringIO()
    screen = ChatScreen(out, err)
    screen.prompt_shown("> ")
    screen.write("out", "text")
    screen.set_status("working")
    screen.write("err", "note\n")
    assert (out.getvalue(), err.getvalue()) == ("text", "note\n")
