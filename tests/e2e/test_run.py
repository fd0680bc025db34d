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
# The checkout under test, whatever acp_bridge is installed (the bridge may run in tmp_path).
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py")]


def run(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
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
    goes on, nothing is prompted twice. The resuming run exits 4: a message it answers for
    (the cut one) did not end done."""
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
        env=ENV,
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
    assert result.returncode == 4, result.stderr
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
        env=ENV,
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
        bridge.wait(timeout=30)  # reaped even when the test failed: no warning in a later test
    assert agent_pid is not None
    with contextlib.suppress(psutil.NoSuchProcess):
        assert psutil.Process(agent_pid).status() == psutil.STATUS_ZOMBIE


STUBBORN = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "stubborn_agent.py")]
SLOW = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "slow_agent.py")]


def start_bridge(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=ENV,
    )


def read_until_update(bridge: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """The events up to the first update of the turn: the turn is running."""
    assert bridge.stdout is not None
    seen = []
    for line in bridge.stdout:
        seen.append(json.loads(line))
        if seen[-1]["event"] == "update":
            return seen
    raise AssertionError(f"the bridge ended before the turn started: {seen}")


def finish(bridge: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    try:
        out, err = bridge.communicate(timeout=timeout)
    finally:
        bridge.kill()
        bridge.communicate(timeout=30)  # reaped even on a timeout: no warning in a later test
    return bridge.returncode, out, err


def stored_rows(store: Path) -> list[tuple[int, str]]:
    with contextlib.closing(sqlite3.connect(store)) as db:
        return db.execute("SELECT seq, state FROM messages ORDER BY seq").fetchall()


def test_sigint_records_the_turn_cancelled_and_resume_does_not_call_it_a_crash(
    tmp_path: Path,
) -> None:
    """Before the fix the store kept the message ``running`` after SIGINT, no ``turn_ended``
    was printed, and ``--resume`` reported "the bridge stopped during this turn"."""
    store = tmp_path / "s.db"
    bridge = start_bridge(
        "--store", str(store), "-m", "echo working; wait", "--", *ECHO, cwd=tmp_path
    )
    before = read_until_update(bridge)
    bridge.send_signal(signal.SIGINT)
    returncode, out, err = finish(bridge, timeout=30)
    assert returncode == 130, err
    after = events(out)
    ended = [e for e in after if e["event"] == "turn_ended"]
    assert [(e["seq"], e["state"]) for e in ended] == [(1, "cancelled")]
    assert all(e["event"] != "turn_failed" for e in before + after)
    assert stored_rows(store) == [(1, "cancelled")]

    resumed = run("--json", "--store", str(store), "--resume", "--", *ECHO, stdin="", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert [e for e in events(resumed.stdout) if e["event"] == "turn_failed"] == []
    assert "bridge stopped" not in resumed.stdout + resumed.stderr
    assert stored_rows(store) == [(1, "cancelled")]  # stopped, so not prompted again


def test_a_second_sigint_kills_the_agent_tree_at_once_and_exits_130(tmp_path: Path) -> None:
    """A stubborn agent that ignores cancel, EOF and SIGTERM, with a grandchild. The first
    SIGINT starts the graceful stop (a 30 s grace window here); the second one must stop now.
    Before the fix the second SIGINT broke the shutdown: the exit took 9.5 s and reported a
    false "survived SIGKILL". Connect-back sockets prove the whole tree is gone."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    port = listener.getsockname()[1]
    agent = [*STUBBORN, "--ignore-sigterm", "--fork", "--connect-back", str(port)]
    bridge = start_bridge(
        "-v", "--store", str(tmp_path / "s.db"), "--grace", "30", "-m", "hi", "--", *agent,
        cwd=tmp_path,
    )  # fmt: skip
    peers = []
    agent_pid = None
    try:
        for _ in range(2):
            peers.append(listener.accept()[0])
        started = read_until_update(bridge)
        agent_pid = next(e["pid"] for e in started if e["event"] == "agent_started")
        bridge.send_signal(signal.SIGINT)
        # Two signals sent back to back may reach the bridge as one (the kernel does not queue
        # them): send the second once the first has been acted on, i.e. once the agent (its
        # stderr forwarded with -v) got session/cancel, which it ignores.
        assert bridge.stderr is not None
        for line in bridge.stderr:
            if "session/cancel" in line:
                break
        bridge.send_signal(signal.SIGINT)
        returncode, _out, err = finish(bridge, timeout=20)
        assert returncode == 130, err
        assert "survived" not in err
        for peer in peers:  # each process's socket closes when it dies
            peer.settimeout(20)
            while peer.recv(4096):
                pass
    finally:
        bridge.kill()
        if agent_pid is not None:  # only if the test failed: never leave the agent behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent_pid, signal.SIGKILL)
        for peer in peers:
            peer.close()
        listener.close()
    assert stored_rows(tmp_path / "s.db") == [(1, "cancelled")]


def test_a_hangup_stops_the_agent_tree_and_records_the_turn(tmp_path: Path) -> None:
    """Closing the terminal (SIGHUP) is a stop like SIGTERM. Before, SIGHUP killed the bridge
    with no cleanup: the agent, in its own session, kept running and the store row stayed
    ``running`` (found driving the CLI under a pty)."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    port = listener.getsockname()[1]
    store = tmp_path / "s.db"
    bridge = start_bridge(
        "--json", "--store", str(store), "-m", "echo x; wait",
        "--", *SLOW, "--connect-back", str(port),
        cwd=tmp_path,
    )  # fmt: skip
    peer = None
    try:
        peer = listener.accept()[0]
        read_until_update(bridge)
        bridge.send_signal(signal.SIGHUP)
        returncode, out, err = finish(bridge, timeout=20)
        assert returncode == 130, err
        assert any(e["event"] == "turn_ended" for e in events(out))
        assert stored_rows(store) == [(1, "cancelled")]
        peer.settimeout(20)
        while peer.recv(4096):  # the agent's socket closes when it dies
            pass
    finally:
        bridge.kill()
        if peer is not None:
            peer.close()
        listener.close()
