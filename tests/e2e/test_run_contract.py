"""``acp-bridge run``'s contract (issue #8), through the real process: exit codes, option
validation, the store's file modes, and input that is not clean text."""

from __future__ import annotations

import json
import os
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
