"""Issue 23: a partitioned owner. Host A runs a turn (held open by the gate agent); A is stopped
with SIGSTOP; once its heartbeat is stale, host B is asked for the conversation: B ends A's
sessions, takes the lease and ends the cut message failed and recoverable. A is continued with
SIGCONT and its turn let go: A writes nothing more (its turn's end is never recorded), notices
the lost lease, and stops the turn."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import psycopg

from acp_bridge.pgstore.lease import STALE_ENV
from acp_bridge.pgstore.notify import QUEUE_CHANNEL
from acp_bridge.pgstore.store import PgStore
from tests.host.cli_client import finish, start_serve
from tests.pg.test_connection_loss import GATE_AGENT, _text, _wait_ready
from tests.pg.test_serve_pg import wait_for_state

STALE_S = 3.0
"""The hosts' stale limit here (``$ACP_BRIDGE_LEASE_STALE_S``; 15 s by default): the take-over
is the same, sooner."""
HOSTS_ENV = {STALE_ENV: f"{STALE_S:g}"}


def _wait_stale(url: str, conversation_id: str) -> None:
    """Wait until the stopped owner's heartbeat is older than the hosts' stale limit, by the
    server's clock (what a take-over checks). Only time passes: the server says how long is
    left, and that is waited out once (the stale limit is the behaviour under test)."""
    with psycopg.connect(url, autocommit=True) as conn:
        query = (
            "SELECT EXTRACT(EPOCH FROM heartbeat_at + make_interval(secs => %s) - now())::float8"
            " FROM conversation_owners WHERE conversation_id = %s"
        )
        for _ in range(3):  # again if a heartbeat sent as the owner stopped landed later
            row = conn.execute(query, (STALE_S + 0.5, conversation_id)).fetchone()
            assert row is not None, "the owner holds no lease"
            if row[0] <= 0:
                return
            time.sleep(float(row[0]))
    raise AssertionError("the stopped owner's heartbeat kept being refreshed")


def _wait_line(process: subprocess.Popen[str], needle: str, timeout: float = 60) -> str:
    """Read ``process``'s stderr until a line holds ``needle``."""
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        readable, _, _ = select.select([process.stderr], [], [], deadline - time.monotonic())
        if not readable:
            break
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"no {needle!r} on stderr: {''.join(seen)}")


def test_a_stopped_owner_is_taken_over_and_writes_nothing_once_continued(
    pg_url: str, tmp_path: Path
) -> None:
    fifo, ready = tmp_path / "gate", tmp_path / "ready"
    os.mkfifo(fifo)
    os.mkfifo(ready)
    host_a = start_serve(
        "--store", pg_url, "--socket", str(tmp_path / "a" / "host.sock"), "--", *GATE_AGENT,
        env=HOSTS_ENV,
    )  # fmt: skip
    host_b = None
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(
                agent={"argv": GATE_AGENT}, cwd=str(tmp_path), now=1.0
            )
            other.add_message(
                record.id, _text(f"ready {ready}; gate {fifo}; echo never-recorded"), now=2.0
            )
            _wait_ready(ready)
            host_a.send_signal(signal.SIGSTOP)
            host_b = start_serve(
                "--store", pg_url, "--socket", str(tmp_path / "b" / "host.sock"), "--",
                *GATE_AGENT, env=HOSTS_ENV,
            )  # fmt: skip
            _wait_stale(pg_url, record.id)
            with psycopg.connect(pg_url, autocommit=True) as conn:  # B is asked for it
                conn.execute("SELECT pg_notify(%s, %s)", (QUEUE_CHANNEL, record.id))
            wait_for_state(pg_url, other, record.id, 1, "failed")  # B took it over
            host_a.send_signal(signal.SIGCONT)
            with contextlib.suppress(OSError):  # let A's turn go on, if its agent still waits
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            _wait_line(host_a, "its lease was lost")
            message = other.get_message(record.id, 1)
            assert message is not None and message.state.value == "failed"
            assert message.recoverable
            kinds = [(e.kind, e.seq) for e in other.events(record.id)]
            assert ("turn_ended", 1) not in kinds
            assert "never-recorded" not in (message.reply or "")  # A's reply: not stored
            replies = [e for e in other.events(record.id) if e.kind != "turn_started"]
            assert not any("never-recorded" in str(e.data) for e in replies), kinds
    finally:
        host_a.send_signal(signal.SIGCONT)
        stderr_a = finish(host_a, signal.SIGTERM)
        stderr_b = finish(host_b, signal.SIGTERM) if host_b is not None else ""
    assert "Traceback" not in stderr_a, stderr_a
    assert "Traceback" not in stderr_b, stderr_b
