"""The command line from outside: help and usage errors (the demo: tests/e2e/test_demo.py)."""

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
