"""`acp-bridge run` through the real process: agents that need authentication (#8 defect 3),
commands that are not ACP agents (defect 7), and ``--permission ask`` on a real terminal, a
pty, and with no terminal at all (defect 8)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import sqlite3
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
ECHO = [sys.executable, "-u", str(AGENTS / "echo_agent.py")]
PERMISSION = [sys.executable, "-u", str(AGENTS / "permission_agent.py")]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
BRIDGE = [sys.executable, "-m", "acp_bridge", "run"]


def run(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The bridge with no controlling terminal (a new session), stdin empty: a pipeline."""
    return subprocess.run(
        [*BRIDGE, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=timeout,
        start_new_session=True,
    )


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def states(store: Path) -> list[tuple[int, str]]:
    with contextlib.closing(sqlite3.connect(store)) as db:
        return list(db.execute("SELECT seq, state FROM messages ORDER BY seq"))


# -- authentication (defect 3) --------------------------------------------------------------------


def test_an_agent_requiring_auth_exits_3_listing_its_methods(tmp_path: Path) -> None:
    result = run(
        "--json", "--store", str(tmp_path / "s.db"), "-m", "a", "-m", "b",
        "--", *ECHO, "--require-auth",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "requires authentication: Authentication required" in result.stderr
    assert "--auth-method fake-login (Fake login)" in result.stderr  # descriptions: in the event
    (error,) = [e for e in events(result.stdout) if e["event"] == "error"]
    assert error["code"] == "auth_required"
    assert error["agentMessage"] == "Authentication required"
    assert error["authMethods"] == [
        {
            "id": "fake-login",
            "name": "Fake login",
            "description": "Call authenticate with this methodId",
        }
    ]
    assert "Traceback" not in result.stderr


def test_auth_method_authenticates_after_initialize(tmp_path: Path) -> None:
    result = run(
        "--store", str(tmp_path / "s.db"), "--auth-method", "fake-login", "-m", "hello",
        "--", *ECHO, "--require-auth",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello"


def test_an_auth_method_the_agent_does_not_offer_is_named(tmp_path: Path) -> None:
    result = run(
        "--store", str(tmp_path / "s.db"), "--auth-method", "nope", "-m", "hello",
        "--", *ECHO, "--require-auth",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3
    assert "offers no auth method 'nope'; it offers fake-login (Fake login)" in result.stderr


def test_auth_refused_mid_conversation_stops_the_queue_at_that_message(tmp_path: Path) -> None:
    """Before, -32000 was "recoverable": every queued message was prompted against an agent
    that could only refuse it. Now the first refusal stops the queue; the rest stay queued
    for a --resume after logging in."""
    store = tmp_path / "s.db"
    result = run(
        "--json", "--store", str(store),
        "-m", "one", "-m", "error -32000 Token expired", "-m", "three", "-m", "four",
        "--", *ECHO, "--prompt-words",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    prompted = [e["seq"] for e in events(result.stdout) if e["event"] == "turn_started"]
    assert prompted == [1, 2]
    assert states(store) == [(1, "done"), (2, "failed"), (3, "queued"), (4, "queued")]
    assert "requires authentication: Token expired" in result.stderr
    (error,) = [e for e in events(result.stdout) if e["event"] == "error"]
    assert error["code"] == "auth_required" and error["agentMessage"] == "Token expired"


# -- commands that are not ACP agents (defect 7) -------------------------------------------------


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["cat"], "it echoed our initialize request back instead of answering it"),
        (
            [sys.executable, "-c", "print(1)"],
            "it wrote '1' on stdout, which is not a JSON-RPC message, then exited with code 0",
        ),
        ([*ECHO, "--protocol-version", "2"], "it speaks ACP protocol version 2"),
    ],
    ids=["cat", "print", "protocol-version"],
)
def test_a_command_that_is_no_acp_agent_gets_one_sentence(
    tmp_path: Path, command: list[str], said: str
) -> None:
    result = run("--store", str(tmp_path / "s.db"), "-m", "hi", "--", *command, cwd=tmp_path)
    assert result.returncode == 3
    first = result.stderr.splitlines()[0]
    assert first.startswith("acp-bridge: ")
    assert " could not be started: " + said in first, result.stderr
    assert "SIGKILL" not in result.stderr
    assert "WARNING" not in result.stderr


def test_a_silent_command_is_given_up_at_the_startup_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run(
        "--json", "--store", str(tmp_path / "s.db"), "--startup-timeout", "1", "-m", "hi",
        "--", sys.executable, "-c", "import time; time.sleep(60)",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3
    assert time.monotonic() - started < 30  # not the old 60 s default, let alone forever
    assert "wrote nothing on stdout within 1 s of our initialize request" in result.stderr
    (error,) = [e for e in events(result.stdout) if e["event"] == "error"]
    assert error["code"] == "agent_failed"


def test_startup_timeout_must_be_positive(tmp_path: Path) -> None:
    result = run("--startup-timeout", "0", "-m", "hi", "--", "cat", cwd=tmp_path)
    assert result.returncode == 2
    assert "--startup-timeout" in result.stderr and "> 0" in result.stderr


# -- --permission ask on a terminal (defect 8) -----------------------------------------------------


class Terminal:
    """The bridge on a pty that is its controlling terminal, as in an interactive shell."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.master, slave = pty.openpty()

        def become_terminal_session() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            [*BRIDGE, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=ENV if env is None else env,
            preexec_fn=become_terminal_session,
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, text: bytes, timeout: float = 30) -> bytes:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {text!r}; the terminal showed {self.seen[-2000:]!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the bridge closed the terminal
                    chunk = b""
                assert chunk, f"the terminal closed before {text!r}: {self.seen[-2000:]!r}"
                self.seen += chunk
        return self.seen

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def finish(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, "the bridge did not exit"
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


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [(b"2\r", b"permission selected"), (b"\r", b"permission cancelled")],
    ids=["allow-once", "empty-cancels"],
)
def test_permission_ask_asks_on_the_terminal(tmp_path: Path, answer: bytes, outcome: bytes) -> None:
    """Before, /dev/tty was opened "r+" (not seekable: it raises on a terminal), the error was
    swallowed and every request was answered cancelled without a question."""
    terminal = Terminal(
        ["--store", str(tmp_path / "s.db"), "--permission", "ask", "-m", "go", "--", *PERMISSION],
        tmp_path,
    )
    try:
        terminal.read_until(b"empty: cancel: ")
        assert b"the agent asks permission for:" in terminal.seen
        assert b"2) " in terminal.seen and b"[allow_once]" in terminal.seen
        terminal.type(answer)
        terminal.read_until(outcome)
        if outcome == b"permission selected":
            terminal.read_until(b"allow_once")
        assert terminal.finish() == 0
    finally:
        terminal.close()


def test_an_answer_that_is_no_choice_is_asked_again_and_y_allows(tmp_path: Path) -> None:
    """Before, any answer that was not a listed number (a stray "y", as chat teaches) silently
    cancelled the request."""
    terminal = Terminal(
        ["--store", str(tmp_path / "s.db"), "--permission", "ask", "-m", "go", "--", *PERMISSION],
        tmp_path,
    )
    try:
        terminal.read_until(b"empty: cancel: ")
        terminal.type(b"maybe\r")
        terminal.read_until(b"'maybe' is not one of the choices; again: ")
        terminal.type(b"y\r")
        terminal.read_until(b"permission selected")
        terminal.read_until(b"allow_once")
        assert terminal.finish() == 0
    finally:
        terminal.close()


def test_the_default_on_a_terminal_is_to_ask(tmp_path: Path) -> None:
    """--help says the default is "ask on a terminal, deny otherwise": the code now agrees."""
    terminal = Terminal(
        ["--store", str(tmp_path / "s.db"), "-m", "go", "--", *PERMISSION], tmp_path
    )
    try:
        terminal.read_until(b"empty: cancel: ")
        terminal.type(b"2\n")
        terminal.read_until(b"permission selected")
        assert terminal.finish() == 0
    finally:
        terminal.close()


def test_permission_ask_without_a_terminal_warns_once_and_denies(tmp_path: Path) -> None:
    result = run(
        "--store", str(tmp_path / "s.db"), "--permission", "ask", "-m", "go", "-m", "again",
        "--", *PERMISSION,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("there is no terminal to ask on") == 1
    assert result.stdout.count("permission selected") == 2
    assert "allow" not in result.stdout.replace("allow_", "")  # only reject kinds chosen
    assert result.stdout.count("reject") >= 2


def test_without_a_terminal_the_default_is_deny_and_silent(tmp_path: Path) -> None:
    result = run("--store", str(tmp_path / "s.db"), "-m", "go", "--", *PERMISSION, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "reject" in result.stdout
    assert "will be denied" not in result.stderr  # no warning: deny is what was asked for


def test_a_startup_progress_line_shows_on_a_terminal(tmp_path: Path) -> None:
    terminal = Terminal(
        ["--store", str(tmp_path / "s.db"), "--startup-timeout", "3", "-m", "hi",
         "--", sys.executable, "-c", "import time; time.sleep(60)"],
        tmp_path,
    )  # fmt: skip
    try:
        terminal.read_until(b"starting python")
        terminal.read_until(b"(gives up at 3 s)")
        terminal.read_until(b"could not be started")
        assert terminal.finish() == 3
    finally:
        terminal.close()
