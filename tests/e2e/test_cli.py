"""The command line from outside: help, usage errors, and the interim demo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The checkout under test, whatever acp_bridge is installed (the bridge may run in tmp_path).
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=60,
    )


def test_help_lists_the_commands_and_exit_codes() -> None:
    result = _cli("--help")
    assert result.returncode == 0
    assert "demo" in result.stdout
    assert "Exit codes" in result.stdout


def test_no_command_is_a_usage_error() -> None:
    result = _cli()
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_an_unknown_option_is_a_usage_error() -> None:
    result = _cli("demo", "--bogus")
    assert result.returncode == 2
    assert "unrecognized arguments" in result.stderr


def test_the_demo_streams_a_turn_cancels_one_and_leaves_no_process() -> None:
    result = _cli("demo")
    assert result.returncode == 0, result.stderr
    assert "Hello from acp-bridge" in result.stdout
    assert "turn ended: end_turn" in result.stderr
    assert "turn ended: cancelled" in result.stderr
    assert "is empty: True" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_demo_explains_a_missing_agent_without_a_traceback(tmp_path: Path) -> None:
    result = _cli("demo", "--agent-script", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert result.returncode == 3
    assert "cannot find the fixture echo agent" in result.stderr
    assert "Traceback" not in result.stderr
