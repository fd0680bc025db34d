"""Issue 23: ``acp-bridge cancel`` reaches an owner on another host through the database (a
notification on ``acp_bridge_control`` the owner acts on): the running turn ends cancelled and
the queue goes on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from acp_bridge.pgstore.store import PgStore
from tests.host.cli_client import ENV, ROOT, finish, start_serve
from tests.pg.test_connection_loss import GATE_AGENT, _text, _wait_ready
from tests.pg.test_serve_pg import wait_for_state


def test_cancel_through_another_host_cancels_the_owners_turn(pg_url: str, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    host = start_serve(
        "--store", pg_url, "--socket", str(tmp_path / "s" / "host.sock"), "--", *GATE_AGENT
    )
    state = Path(tempfile.mkdtemp(prefix="acpb-"))  # the verb finds no host here: elsewhere
    env = {**ENV, "XDG_STATE_HOME": str(state), "XDG_RUNTIME_DIR": ""}
    stderr = ""
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(
                agent={"argv": GATE_AGENT}, cwd=str(tmp_path), now=1.0
            )
            other.add_message(record.id, _text(f"ready {ready}; wait 120"), now=2.0)
            other.add_message(record.id, _text("after"), now=3.0)
            _wait_ready(ready)
            cancel = subprocess.run(
                [sys.executable, "-m", "acp_bridge", "cancel", "--store", pg_url, record.id],
                capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
            )  # fmt: skip
            assert cancel.returncode == 0, cancel.stderr
            assert "asked the host that owns" in cancel.stderr
            wait_for_state(pg_url, other, record.id, 1, "cancelled")
            wait_for_state(pg_url, other, record.id, 2, "done")  # the queue went on
    finally:
        stderr = finish(host, signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)
    assert "Traceback" not in stderr, stderr


def test_send_through_a_host_that_does_not_own_the_conversation_commits_it_for_the_owner(
    pg_url: str, tmp_path: Path
) -> None:
    echo = [*GATE_AGENT]
    socket_b = tmp_path / "b" / "host.sock"
    socket_a = tmp_path / "a" / "host.sock"
    host_a = start_serve("--store", pg_url, "--socket", str(socket_a), "--", *echo)
    host_b = None
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(agent={"argv": echo}, cwd=str(tmp_path), now=1.0)
            other.add_message(record.id, _text("first"), now=2.0)
            wait_for_state(pg_url, other, record.id, 1, "done")  # host A (the only one) owns it
            host_b = start_serve("--store", pg_url, "--socket", str(socket_b), "--", *echo)
            sent = subprocess.run(
                [sys.executable, "-m", "acp_bridge", "send", "--store", pg_url,
                 "--socket", str(socket_b), record.id, "-m", "through b"],
                capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60,
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.split() == ["2"]
            assert "owned by a host elsewhere" in sent.stderr
            wait_for_state(pg_url, other, record.id, 2, "done")  # A ran it
    finally:
        stderr_a = finish(host_a, signal.SIGTERM)
        stderr_b = finish(host_b, signal.SIGTERM) if host_b is not None else ""
    assert "Traceback" not in stderr_a + stderr_b, stderr_a + stderr_b
