"""Issue #21 item 24: "Some events appear twice: once as a raw log line with the logger's name".

``run`` and ``chat`` show every lifecycle event themselves (a line, or a ``--json`` event). The
library also logs each one (``acp_bridge.client.events`` at INFO, a replaced session at WARNING
from ``acp_bridge.client.restore``), and those records reached stderr beside the event's own
line: the replaced session even without ``-v``. Each event now has one line; with ``-v`` the
agent's start and a restored session get a line of their own instead of a raw record."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.e2e.test_run_start_auth_ask import AGENTS, events, run

CRASHY = [sys.executable, "-u", str(AGENTS / "crashy_agent.py"), "--quiet"]


def crash_once(tmp_path: Path, *flags: str) -> list[str]:
    """A turn cut by a crash, a restart, and a second turn; the command's own flags."""
    return [
        "--store", str(tmp_path / "s.db"), *flags, "-m", "one", "-m", "two",
        "--", *CRASHY, "--crash-once-file", str(tmp_path / "crashed"),
    ]  # fmt: skip


@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["plain", "verbose"])
def test_a_replaced_session_and_a_restart_are_told_once_each(
    tmp_path: Path, verbose: list[str]
) -> None:
    result = run(*crash_once(tmp_path, *verbose), "--no-load", cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    err = result.stderr
    assert err.count("could not be restored; continuing in") == 1, err
    assert "replaced by" not in err
    assert err.count("agent crashy_agent ended: exited with code 1") == 1, err
    assert err.count("restarting crashy_agent (attempt 1)") == 1, err
    assert "acp_bridge.client" not in err, err  # no log record repeating an event
    if verbose:
        assert err.count("agent crashy_agent started: pid ") == 2, err
        assert "crashy-agent 0.1.0, ACP protocol 1" in err
    else:
        assert "started: pid" not in err


def test_a_restored_session_gets_one_line_with_verbose(tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    result = run(*crash_once(tmp_path, "-v"), "--history", str(history), cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    assert result.stderr.count(" restored (load)\n") == 1, result.stderr
    assert "SessionRestored(" not in result.stderr
    assert "AgentStarted(" not in result.stderr


def test_with_json_and_verbose_the_events_are_on_stdout_only(tmp_path: Path) -> None:
    result = run(*crash_once(tmp_path, "--json", "-v"), "--no-load", cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    kinds = [event["event"] for event in events(result.stdout)]
    for kind in ("agent_started", "agent_exited", "agent_restarted", "session_replaced"):
        assert kind in kinds
    assert "acp_bridge.client" not in result.stderr, result.stderr
    assert "replaced by" not in result.stderr
