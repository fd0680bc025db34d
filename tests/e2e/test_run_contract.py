"""``acp-bridge run``'s contract (issue #8), through the real process: exit codes, option
validation, the store's file modes, and input that is not clean text."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
ECHO = [sys.executable, "-u", str(AGENTS / "echo_agent.py")]
CRASHY = [sys.executable, "-u", str(AGENTS / "crashy_agent.py")]
# The checkout under test, whatever acp_bridge is installed (the bridge may run in tmp_path).
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def run(
    *args: str, stdin: bytes | None = None, cwd: Path = ROOT, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=ENV,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode("utf-8", "replace"),
        result.stderr.decode("utf-8", "replace"),
    )


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


# -- exit codes (defect 2) ----------------------------------------------------------------------


def test_every_message_done_exits_0(tmp_path: Path) -> None:
    result = run("--store", str(tmp_path / "s.db"), "-m", "echo a", "-m", "echo b", "--", *ECHO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["a", "b"]


def test_an_agent_error_exits_4_and_the_next_messages_still_run(tmp_path: Path) -> None:
    """Before the fix a recoverable failure (here the agent's -32603) exited 0."""
    result = run(
        "--store", str(tmp_path / "s.db"), "-m", "error", "-m", "echo after", "--", *ECHO
    )
    assert result.returncode == 4, result.stderr
    assert result.stdout.splitlines() == ["after"]


def test_a_turn_cancelled_by_its_deadline_exits_4(tmp_path: Path) -> None:
    """Before the fix a turn cut by --turn-timeout exited 0."""
    result = run(
        "--store", str(tmp_path / "s.db"), "--turn-timeout", "0.5", "-m", "wait", "--", *ECHO
    )
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr


def test_an_agent_given_up_exits_4(tmp_path: Path) -> None:
    """The restart policy gives up at the first crash (--max-restarts 0): the crashed message
    failed and the next one was never prompted."""
    result = run(
        "--store", str(tmp_path / "s.db"), "--max-restarts", "0",
        "-m", "hi", "-m", "never sent", "--", *CRASHY,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert "never sent" not in result.stdout


def test_an_agent_that_dies_at_initialize_exits_3(tmp_path: Path) -> None:
    result = run(
        "--store", str(tmp_path / "s.db"), "-m", "hi", "--", *CRASHY, "--crash-on", "initialize"
    )
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr


def test_a_command_that_cannot_be_started_is_a_spawn_failed_error_event(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-agent")
    result = run("--json", "--store", str(tmp_path / "s.db"), "-m", "hi", "--", missing)
    assert result.returncode == 3, result.stderr
    (error,) = [e for e in events(result.stdout) if e["event"] == "error"]
    assert error["code"] == "spawn_failed"  # not agent_failed: nothing was started
    assert missing in error["message"] and "Check the agent command" in error["message"]
    assert "Traceback" not in result.stderr


def test_run_help_documents_the_exit_codes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", "--help"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=30,
    )
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "0 every message ended done" in text
    assert "4 at least one message did not end done" in text
    assert "3 the agent could not be started, initialized or authenticated" in text
    assert "2 usage error" in text
    assert "130 interrupted" in text


# -- options (defect 9) -------------------------------------------------------------------------


def _usage_error(result: subprocess.CompletedProcess[str], option: str, value: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr  # one line, no traceback, no usage block
    assert option in lines[0] and value in lines[0], lines[0]


def test_bad_option_values_are_one_line_usage_errors(tmp_path: Path) -> None:
    """Before the fix ``--grace -1`` and ``--turn-timeout -2`` gave tracebacks and
    ``--max-restarts -3`` was accepted."""
    store = str(tmp_path / "s.db")
    for option, value in (
        ("--grace", "-1"),
        ("--turn-timeout", "-2"),
        ("--idle-timeout", "-0.5"),
        ("--idle-timeout", "nan"),
        ("--grace", "abc"),
        ("--max-restarts", "-3"),
        ("--max-message-bytes", "0"),
    ):
        result = run("--store", store, option, value, "-m", "hi", "--", *ECHO)
        _usage_error(result, option, value)
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened


def test_a_missing_cwd_is_named_as_a_missing_directory(tmp_path: Path) -> None:
    """Before the fix the agent command was blamed ("Check the agent command"), exit 3."""
    missing = str(tmp_path / "no-such-dir")
    result = run("--store", str(tmp_path / "s.db"), "--cwd", missing, "-m", "hi", "--", *ECHO)
    _usage_error(result, "--cwd", missing)
    assert "does not exist" in result.stderr
    assert "agent command" not in result.stderr


def test_idle_and_turn_timeouts_of_0_mean_off(tmp_path: Path) -> None:
    """Before the fix ``--idle-timeout 0`` failed every turn at once ("ran past its deadline").
    The turn trickles for ~0.3 s, far past a zero deadline."""
    result = run(
        "--store", str(tmp_path / "s.db"), "--idle-timeout", "0", "--turn-timeout", "0",
        "-m", "trickle 3 100", "--", *ECHO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["trickle-1-0", "trickle-1-1", "trickle-1-2"]


def test_agent_gave_up_is_emitted_in_json(tmp_path: Path) -> None:
    """The restart policy gives up at the first crash (--max-restarts 0); before the fix the
    --json stream never carried ``agent_gave_up``."""
    result = run(
        "--json", "--store", str(tmp_path / "s.db"), "--max-restarts", "0",
        "-m", "hi", "-m", "never sent", "--", *CRASHY,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    seen = events(result.stdout)
    kinds = [e["event"] for e in seen]
    assert kinds.count("agent_gave_up") == 1, kinds
    gave_up = next(e for e in seen if e["event"] == "agent_gave_up")
    assert "giving up" in gave_up["reason"] and gave_up["history"]
    assert kinds.index("agent_exited") < kinds.index("agent_gave_up")


# -- the store is private (defect 11) ----------------------------------------------------------


def test_the_store_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """Under umask 000 the bridge creates the store's directory 0700 and the database, its WAL
    and its shared-memory file 0600 (seen while a turn runs, as the WAL is removed at close).
    Before the fix they were 0777/0666 (0755/0644 under the usual umask 022)."""
    store = tmp_path / "state" / "acp-bridge" / "store.db"
    bridge = subprocess.Popen(
        [
            "sh", "-c", 'umask 000; exec "$@"', "sh",
            sys.executable, "-m", "acp_bridge", "run", "--json", "--store", str(store),
            "-m", "echo working; wait", "--", *ECHO,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=ENV,
    )  # fmt: skip
    try:
        assert bridge.stdout is not None
        for line in bridge.stdout:
            if json.loads(line)["event"] == "update":
                break
        modes = {
            p.name: p.stat().st_mode & 0o777
            for p in (store.parent, store, Path(f"{store}-wal"), Path(f"{store}-shm"))
        }
        bridge.send_signal(signal.SIGTERM)
        assert bridge.wait(timeout=30) == 130
    finally:
        bridge.kill()
        bridge.communicate()
    assert modes == {
        "acp-bridge": 0o700,
        "store.db": 0o600,
        "store.db-wal": 0o600,
        "store.db-shm": 0o600,
    }


# -- input that is not clean text (defect 12) ---------------------------------------------------


def reap(bridge: subprocess.Popen[bytes]) -> None:
    """Only if the test failed is anything left: kill the bridge, close our ends, reap it."""
    bridge.kill()
    for stream in (bridge.stdin, bridge.stdout, bridge.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()
    bridge.wait(timeout=30)


def stored_texts(store: Path) -> list[tuple[int, str, str]]:
    import sqlite3

    db = sqlite3.connect(store)
    try:
        rows = db.execute("SELECT seq, state, content FROM messages ORDER BY seq").fetchall()
    finally:
        db.close()
    return [(seq, state, json.loads(content)[0]["text"]) for seq, state, content in rows]


def test_a_stdin_line_that_is_not_utf8_is_refused_and_the_next_lines_go_on(
    tmp_path: Path,
) -> None:
    """Before the fix a Latin-1 byte crashed the bridge (UnicodeEncodeError in the store) and
    the lines after it were never stored."""
    store = tmp_path / "s.db"
    result = run("--store", str(store), "--", *ECHO, stdin=b"echo one\necho caf\xe9\necho three\n")
    assert result.returncode == 4, result.stderr
    assert result.stdout.splitlines() == ["one", "three"]
    assert "stdin line 2 refused: not valid UTF-8" in result.stderr
    assert "Traceback" not in result.stderr
    assert stored_texts(store) == [(1, "done", "echo one"), (2, "done", "echo three")]


def test_a_message_argument_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    """argv bytes that are not UTF-8 arrive as lone surrogates; before the fix they crashed the
    bridge in the store."""
    result = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", "--store", str(tmp_path / "s.db"),
         "-m", b"caf\xe9", "--", *ECHO],
        capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "not valid UTF-8" in result.stderr
    assert not (tmp_path / "s.db").exists()


def test_an_endless_stdin_line_is_refused_without_buffering_it(tmp_path: Path) -> None:
    """200 MB with no newline (``yes X | tr -d '\\n'``): the bridge refuses the line as soon as
    it passes --max-message-bytes and drops the rest as it arrives, so its memory stays flat.
    Before the fix readline() buffered all of it (24 GB in the issue's run)."""
    import psutil

    bridge = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--store", str(tmp_path / "s.db"),
         "--max-message-bytes", "100000", "--", *ECHO],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert bridge.stdin is not None
    peak = 0
    try:
        block = b"X" * (1 << 20)
        for _ in range(200):
            bridge.stdin.write(block)  # blocks while the bridge does not read
            peak = max(peak, psutil.Process(bridge.pid).memory_info().rss)
        bridge.stdin.write(b"\necho after\n")
        bridge.stdin.close()
        assert bridge.stdout is not None and bridge.stderr is not None
        out, err = bridge.stdout.read(), bridge.stderr.read()  # stderr is a few lines
        bridge.wait(timeout=60)
    finally:
        reap(bridge)
    assert bridge.returncode == 4, err
    assert out.decode().splitlines() == ["after"]
    assert err.decode().count("stdin line 1 refused: longer than --max-message-bytes") == 1
    assert peak < 150 * 1024 * 1024, f"the bridge grew to {peak / 2**20:.0f} MiB"


def test_sigterm_with_stdin_open_and_idle_exits_at_once(tmp_path: Path) -> None:
    """stdin stays open and sends nothing after the first line: SIGTERM must not wait for it.
    Before the fix the bridge stopped the agent but exited only when stdin produced a line."""
    bridge = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--json", "--store", str(tmp_path / "s.db"),
         "--", *ECHO],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert bridge.stdin is not None and bridge.stdout is not None
    try:
        bridge.stdin.write(b"echo hi\n")
        bridge.stdin.flush()
        for line in bridge.stdout:
            if json.loads(line)["event"] == "turn_ended":
                break
        bridge.send_signal(signal.SIGTERM)
        assert bridge.wait(timeout=15) == 130
    finally:
        reap(bridge)
