"""How a one-shot ``run`` ends, through the real ``acp-bridge`` (issue 21, items 25 and 24).

25. Once every message was settled, recorded and printed, ``run`` waited for the agent's own
    teardown: the default EOF window (``STDIN_CLOSE_GRACE_S``, 2 s) before SIGTERM. Now the
    agent's tree is stopped within ``SETTLED_SHUTDOWN``'s short bounds (0.2 s after EOF, then
    SIGTERM, 0.3 s, then SIGKILL), and nothing of it is left.
24. After a crash on the last message, ``run`` started a new agent generation only to stop it,
    told the user the agent was being restarted, and sometimes printed asyncio's "Loop ... that
    handles pid ... is closed" (that spawn, cancelled half-way, was never reaped by the bridge).
    Now no process is started when nothing more is queued and the input has ended, and the run
    exits 4 (a message failed) with a clean stderr, on both paths: a new conversation (its agent
    spawned before the library is imported) and a continued one (spawned by the supervisor).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from acp_bridge.process.launcher import STDIN_CLOSE_GRACE_S
from tests.e2e.test_run import ENV, events, finish, stored_rows
from tests.e2e.test_run_owner import next_event
from tests.e2e.test_run_signals import agent_listener, wait_agent_gone

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
SLOW_EXIT = [sys.executable, "-u", str(AGENTS / "slow_exit_agent.py"), "--quiet"]
CRASHY = [sys.executable, "-u", str(AGENTS / "crashy_agent.py"), "--quiet"]


def start_run(*args: str, cwd: Path, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--json", *args],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=ENV,
    )


def run(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", "--json", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=60,
    )


def alive(pid: int) -> bool:
    """A process that runs (a zombie left to a non-reaping init is dead)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_alive(pgid: int) -> list[int]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


# -- 25. the agent's own teardown is not waited for -------------------------------------------


@pytest.mark.parametrize("source", ["-m", "stdin"])
def test_a_one_shot_run_stops_a_slow_exiting_agent_at_once_and_leaves_nothing(
    tmp_path: Path, source: str
) -> None:
    """The agent takes 30 s to exit after EOF and has a child in its group. The run used to
    wait out the 2 s EOF window after its last event; now it stops the tree in about 0.5 s."""
    with agent_listener() as (listener, connect_back):
        agent = [*SLOW_EXIT, *connect_back]
        messages = ["-m", "hello"] if source == "-m" else []
        bridge = start_run(
            "--store", str(tmp_path / "s.db"), *messages, "--", *agent,
            cwd=tmp_path, stdin=source == "stdin",
        )  # fmt: skip
        peers = [listener.accept()[0] for _ in range(2)]  # the agent and its child
        pids: set[int] = set()
        try:
            if bridge.stdin is not None:
                bridge.stdin.write("hello\n")
                bridge.stdin.close()  # EOF: the input has ended
                bridge.stdin = None  # (communicate() would flush it)
            assert bridge.stdout is not None
            pgid = next_event(bridge.stdout, "agent_started")["pid"]
            for peer in peers:  # "alive <pid> [grandchild]"
                pids.add(int(peer.recv(200).split()[1]))
            ended = next_event(bridge.stdout, "turn_ended")
            settled_at = time.monotonic()
            returncode, out, err = finish(bridge, timeout=60)
            waited = time.monotonic() - settled_at
            # What is left when run returns: nothing of the tree, by pid or by group.
            left = [pid for pid in pids if alive(pid)] + group_alive(pgid)
        finally:
            bridge.kill()
            for pid in pids:  # only if the test failed: never leave the tree behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        assert returncode == 0, err
        assert ended["stopReason"] == "end_turn"
        assert pgid in pids
        assert left == []
        assert out == "", "nothing is printed after the last message's events"
        assert err == ""
        # The old stop waited this long for the agent's exit after EOF before any signal.
        assert waited < STDIN_CLOSE_GRACE_S, f"run waited {waited:.2f} s for the agent's exit"
        for peer in peers:
            wait_agent_gone(peer)
    assert stored_rows(tmp_path / "s.db") == [(1, "done")]


# -- 24. a crash on the last message --------------------------------------------------------


def assert_no_restart_and_clean(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    seen = events(result.stdout)
    names = [event["event"] for event in seen]
    assert result.returncode == 4, result.stderr
    assert names.count("agent_started") == 1, names
    assert "agent_restarted" not in names
    exited = next(event for event in seen if event["event"] == "agent_exited")
    assert exited["will_restart"] is False
    failed = next(event for event in seen if event["event"] == "turn_failed")
    assert failed["recoverable"] is True, "a later run may retry it (--retry-failed)"
    assert "restarting it and restoring" not in failed["error"]["message"]
    assert "not restarting it: the bridge is stopping" in failed["error"]["message"]
    assert "Loop" not in result.stderr
    assert "Traceback" not in result.stderr
    return seen


@pytest.mark.parametrize("source", ["-m", "stdin"])
def test_a_crash_on_the_last_message_starts_no_new_agent_and_exits_4(
    tmp_path: Path, source: str
) -> None:
    store = tmp_path / "s.db"
    messages = ["-m", "hello"] if source == "-m" else []
    stdin = "hello\n" if source == "stdin" else None
    first = run(
        "-v", "--store", str(store), *messages, "--", *CRASHY, cwd=tmp_path, stdin=stdin
    )  # the new conversation's agent is spawned early, before the library is imported
    seen = assert_no_restart_and_clean(first)
    conversation = next(event for event in seen if event["event"] == "session")["conversation"]
    # A continued conversation's agent is spawned by the supervisor.
    again = run(
        "-v", "--store", str(store), "--conversation", conversation, *messages, "--", *CRASHY,
        cwd=tmp_path, stdin=stdin,
    )  # fmt: skip
    assert_no_restart_and_clean(again)
    assert stored_rows(store) == [(1, "failed"), (2, "failed")]


def test_a_crash_with_a_message_still_queued_restarts_the_agent_for_it(tmp_path: Path) -> None:
    """Only the last message goes without a restart: the next one still needs the agent."""
    once = ["--crash-once-file", str(tmp_path / "crashed")]
    result = run(
        "--store", str(tmp_path / "s.db"), "-m", "one", "-m", "two", "--", *CRASHY, *once,
        cwd=tmp_path,
    )  # fmt: skip
    names = [event["event"] for event in events(result.stdout)]
    assert result.returncode == 4, result.stderr
    assert names.count("agent_restarted") == 1
    assert names.count("agent_started") == 2
    assert stored_rows(tmp_path / "s.db") == [(1, "failed"), (2, "done")]
    assert "Traceback" not in result.stderr
