"""``acp-bridge run`` from outside, as a script would use it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py")]


def run(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_messages_run_in_order_and_text_goes_to_stdout(tmp_path: Path) -> None:
    result = run(
        "--store", str(tmp_path / "s.db"), "-m", "hello there", "-m", "echo again", "--", *ECHO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["hello there", "again"]


def test_stdin_lines_are_messages(tmp_path: Path) -> None:
    result = run("--store", str(tmp_path / "s.db"), "--", *ECHO, stdin="echo one\n\necho two\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["one", "two"]


def test_json_events_follow_the_contract(tmp_path: Path) -> None:
    result = run("--json", "--store", str(tmp_path / "s.db"), "-m", "echo hi", "--", *ECHO)
    assert result.returncode == 0, result.stderr
    seen = events(result.stdout)
    assert all("event" in e and "ts" in e for e in seen)
    kinds = [e["event"] for e in seen]
    for kind in ("agent_started", "session", "turn_started", "update", "turn_ended"):
        assert kind in kinds
    ended = next(e for e in seen if e["event"] == "turn_ended")
    assert ended["stopReason"] == "end_turn" and "duration_ms" in ended
    started = next(e for e in seen if e["event"] == "agent_started")
    assert started["protocolVersion"] == 1 and started["agentInfo"]["name"] == "echo-agent"


def test_an_agent_that_cannot_start_exits_3_with_a_clear_message(tmp_path: Path) -> None:
    result = run("--store", str(tmp_path / "s.db"), "-m", "hi", "--", "/nonexistent/agent")
    assert result.returncode == 3
    assert "could not start" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_agent_command_is_a_usage_error(tmp_path: Path) -> None:
    result = run("--store", str(tmp_path / "s.db"), "-m", "hi")
    assert result.returncode == 2
    assert "give the agent command" in result.stderr


def test_resuming_from_another_directory_is_refused(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    assert run("--store", store, "-m", "echo a", "--", *ECHO).returncode == 0
    other = tmp_path / "elsewhere"
    other.mkdir()
    result = run("--store", store, "--resume", "--cwd", str(other), "--", *ECHO)
    assert result.returncode == 2
    assert "was started in" in result.stderr


def test_a_bridge_killed_mid_turn_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    """The queue survives kill -9 of the bridge: the cut message fails (recoverable), the rest
    goes on, nothing is prompted twice."""
    store = tmp_path / "s.db"
    agent = [*ECHO, "--history", str(tmp_path / "history.json")]
    bridge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "acp_bridge",
            "run",
            "--json",
            "--store",
            str(store),
            "-m",
            "echo one",
            "-m",
            "echo two; wait",
            "-m",
            "echo three",
            "--",
            *agent,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    agent_pid = None
    try:
        assert bridge.stdout is not None
        queued: set[int] = set()
        for line in bridge.stdout:
            event = json.loads(line)
            if event["event"] == "agent_started":
                agent_pid = event["pid"]
            if event["event"] == "queued":
                queued.add(event["seq"])
            if event["event"] == "update" and event["seq"] == 2 and queued == {1, 2, 3}:
                break
        bridge.send_signal(signal.SIGKILL)
        bridge.wait(timeout=30)
    finally:
        bridge.kill()
        if bridge.stdout is not None:
            bridge.stdout.close()
        if agent_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent_pid, signal.SIGKILL)
    result = run("--json", "--store", str(store), "--resume", "--", *agent, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    seen = events(result.stdout)
    assert [e["seq"] for e in seen if e["event"] == "turn_started"] == [3]
    failed = [e for e in seen if e["event"] == "turn_failed"]
    assert [(e["seq"], e["recoverable"]) for e in failed] == [(2, True)]
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT seq, state, attempts FROM messages ORDER BY seq").fetchall()
    db.close()
    assert rows == [(1, "done", 1), (2, "failed", 1), (3, "done", 1)]


def test_sigint_cancels_the_turn_stops_the_agent_and_exits_130(tmp_path: Path) -> None:
    import psutil

    bridge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "acp_bridge",
            "run",
            "--json",
            "--store",
            str(tmp_path / "s.db"),
            "-m",
            "echo working; wait",
            "--",
            *ECHO,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    agent_pid = None
    try:
        assert bridge.stdout is not None
        for line in bridge.stdout:
            event = json.loads(line)
            if event["event"] == "agent_started":
                agent_pid = event["pid"]
            if event["event"] == "update":
                break
        bridge.send_signal(signal.SIGINT)
        assert bridge.wait(timeout=30) == 130
    finally:
        bridge.kill()
        for stream in (bridge.stdout, bridge.stderr):
            if stream is not None:
                stream.close()
    assert agent_pid is not None
    with contextlib.suppress(psutil.NoSuchProcess):
        assert psutil.Process(agent_pid).status() == psutil.STATUS_ZOMBIE
