"""``acp-bridge run --store postgresql://...``: turns end to end on a fixture agent, and a run
killed with ``kill -9`` mid-turn resumed by a second run (the cut message failed and
recoverable, the rest done, nothing prompted twice, no lease left held)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from acp_bridge.pgstore.store import PgStore

ROOT = Path(__file__).resolve().parents[2]
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def run(*args: str, cwd: Path, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_a_run_on_postgresql_runs_its_turns_and_stores_them(pg_url: str, tmp_path: Path) -> None:
    result = run("--store", pg_url, "-m", "one", "-m", "two", "--", *ECHO, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "one" in result.stdout and "two" in result.stdout
    with PgStore.open(pg_url) as store:
        latest = store.latest_conversation()
        assert latest is not None
        assert [m.state.value for m in store.messages(latest.id)] == ["done", "done"]
        assert store.events(latest.id)  # the turns were logged
        # The run let its lease go: another host owns the conversation at once.
        store.own(latest.id)


def test_the_store_may_come_from_the_environment(pg_url: str, tmp_path: Path) -> None:
    env = {**ENV, "ACP_BRIDGE_STORE": pg_url}
    result = run("-m", "hello", "--", *ECHO, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    with PgStore.open(pg_url) as store:
        latest = store.latest_conversation()
        assert latest is not None
        assert [m.state.value for m in store.messages(latest.id)] == ["done"]


def test_a_run_killed_mid_turn_is_resumed_by_the_next_run(pg_url: str, tmp_path: Path) -> None:
    agent = [*ECHO, "--history", str(tmp_path / "history.json")]
    command = [sys.executable, "-m", "acp_bridge", "run", "--json", "--store", pg_url]
    messages = ["-m", "echo one", "-m", "echo two; wait", "-m", "echo three"]
    bridge = subprocess.Popen(
        [*command, *messages, "--", *agent],
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
    # The dead run's session ended with it, and its lease (the advisory lock) with that.
    result = run("--json", "--store", pg_url, "--resume", "--", *agent, cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    seen = events(result.stdout)
    assert [e["seq"] for e in seen if e["event"] == "turn_started"] == [3]
    failed = [e for e in seen if e["event"] == "turn_failed"]
    assert [(e["seq"], e["recoverable"]) for e in failed] == [(2, True)]
    with PgStore.open(pg_url) as store:
        latest = store.latest_conversation()
        assert latest is not None
        rows = [(m.seq, m.state.value, m.attempts) for m in store.messages(latest.id)]
        assert rows == [(1, "done", 1), (2, "failed", 1), (3, "done", 1)]
        store.own(latest.id)  # no lease left held


def test_a_conversation_owned_by_a_live_run_is_refused(pg_url: str, tmp_path: Path) -> None:
    with PgStore.open(pg_url) as other_host:
        record = other_host.create_conversation(agent={"argv": ECHO}, cwd=str(tmp_path), now=1.0)
        other_host.own(record.id)
        result = run(
            "--store", pg_url, "--conversation", record.id, "-m", "hi", "--", *ECHO, cwd=tmp_path
        )
        assert result.returncode == 2
        assert "owned by another live host" in result.stderr
        assert "hi" not in [m.content[0]["text"] for m in other_host.messages(record.id)]
