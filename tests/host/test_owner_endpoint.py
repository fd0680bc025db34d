"""A ``run`` that owns a conversation serves the host's methods for it on a socket of its own,
named in its lock file (issue 22): another process sends into its queue, watches it, cancels
its turn."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from acp_bridge.host.owner import read_owner
from tests.host.cli_client import ENV, ROOT, LineClient, agent


def _next(stdout: Any, name: str) -> dict[str, Any]:
    for line in stdout:
        event = json.loads(line)
        if event["event"] == name:
            return dict(event)
    raise AssertionError(f"run's stdout ended before {name!r}")


def test_a_run_is_reachable_by_send_watch_and_cancel(tmp_path: Path) -> None:
    # A socket's path holds at most 107 bytes: pytest's tmp_path is too deep for one.
    runtime = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))
    try:
        _reachable(tmp_path, runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _reachable(tmp_path: Path, runtime: Path) -> None:
    store = tmp_path / "q.db"
    env = {**ENV, "XDG_RUNTIME_DIR": str(runtime)}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "acp_bridge",
            "run",
            "--json",
            "--store",
            str(store),
            "--",
            *agent("echo_agent.py"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert run.stdin is not None and run.stdout is not None and run.stderr is not None
    try:
        run.stdin.write("echo first; wait 60\n")
        run.stdin.flush()
        session = _next(run.stdout, "session")
        cid = session["conversation"]
        _next(run.stdout, "update")  # the first turn runs
        owner = read_owner(store, cid)
        assert owner is not None and owner.pid == run.pid
        assert owner.socket == runtime / "acp-bridge" / f"c-{cid}.sock"
        client = LineClient(owner.socket)
        status = client.request("_acp_bridge/status", {})["result"]["conversations"]
        assert status[0]["conversationId"] == cid and status[0]["runningSeq"] == 1
        sent = client.request(
            "_acp_bridge/send",
            {
                "conversationId": cid,
                "content": [{"type": "text", "text": "echo second"}],
                "label": "other shell",
            },
        )
        assert sent["result"] == {"seq": 2}
        cancelled = client.request("_acp_bridge/cancel", {"conversationId": cid})
        assert cancelled["result"] == {"cancelled": True, "seq": 1}
        ended = _next(run.stdout, "turn_ended")
        assert ended["seq"] == 1 and ended["stopReason"] == "cancelled"
        second = _next(run.stdout, "turn_ended")
        assert second["seq"] == 2 and second["stopReason"] == "end_turn"
        watched = client.request("_acp_bridge/watch", {"conversationId": cid})
        assert watched["result"]["cursor"] > 0
        kinds = [
            m["params"]["event"]["event"]
            for m in client.notifications
            if m.get("method") == "_acp_bridge/event"
        ]
        assert kinds.count("turn_ended") == 2 and "message_sender" in kinds
        client.close()
        run.stdin.close()
        assert run.wait(timeout=60) == 4  # a message did not end done (cancelled)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        run.stdout.close()
        stderr = run.stderr.read()
        run.stderr.close()
    assert "Traceback" not in stderr
    assert read_owner(store, cid) is None
    assert not (runtime / "acp-bridge" / f"c-{cid}.sock").exists()
