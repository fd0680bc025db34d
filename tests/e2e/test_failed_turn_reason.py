"""Issue #21 item 21: the agent's reason for a failed turn reaches every output and the store.

Agents often answer a generic "Internal error" (-32603) and put the reason in the error's
``data`` (the ACP SDKs' ``internal_error(data)``). Plain output, ``-v``, ``--json``, ``show`` and
the stored message all carry the agent's message, its code and its data."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_run_start_auth_ask import ENV

ROOT = Path(__file__).resolve().parents[2]
ACP_BRIDGE = [sys.executable, "-m", "acp_bridge"]  # any command (run, show): not test_run_output's
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
DATA = {"details": "Invalid JSON arguments: not-json"}
FAILING = [*ECHO, "--error-data", json.dumps(DATA)]
PROMPT = "error -32603 Internal error"
SHOWN = 'Internal error (-32603): {"details":"Invalid JSON arguments: not-json"}'


def bridge(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ACP_BRIDGE, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=60,
        start_new_session=True,
    )


def test_plain_and_verbose_output_show_the_agents_data(tmp_path: Path) -> None:
    for verbose in ([], ["-v"]):
        result = bridge(
            "run", "--store", str(tmp_path / "s.db"), *verbose, "-m", PROMPT, "--", *FAILING,
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 4, result.stderr
        assert f"message 1 failed (recoverable): {SHOWN}" in result.stderr, result.stderr


def test_json_output_show_and_the_store_keep_the_agents_data(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    result = bridge(
        "run", "--store", str(store), "--json", "-m", PROMPT, "--", *FAILING, cwd=tmp_path
    )
    assert result.returncode == 4, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    (failed,) = [e for e in events if e["event"] == "turn_failed"]
    assert failed["error"]["message"] == SHOWN
    conversation = next(e for e in events if e["event"] == "session")["conversation"]
    shown = bridge("show", "--store", str(store), conversation, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"(recoverable): {SHOWN}" in shown.stdout, shown.stdout
    with sqlite3.connect(store) as db:
        (error,) = db.execute("SELECT error FROM messages").fetchone()
    assert json.loads(error)["message"] == SHOWN


def test_a_message_without_data_is_shown_as_the_agent_sent_it(tmp_path: Path) -> None:
    result = bridge(
        "run", "--store", str(tmp_path / "s.db"), "-m", "error -32603 echo agent asked to fail",
        "--", *ECHO,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert "failed (recoverable): echo agent asked to fail (-32603)\n" in result.stderr


def test_an_agent_killed_before_initialize_is_said_in_english(tmp_path: Path) -> None:
    """#21 item 24: "it killed by SIGKILL" read as if the agent killed something."""
    result = bridge(
        "run", "--store", str(tmp_path / "s.db"), "-m", "hi",
        "--", *ECHO, "--crash-on", "initialize", "--signal", "KILL",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "could not be started: it was killed by SIGKILL before answering" in result.stderr
