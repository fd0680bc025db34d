"""Issue 23: connection loss mid-turn is retried within a bound, and a lost lease stops the
local turn at once. A real ``serve`` against the real server; the test ends the host's
sessions with ``pg_terminate_backend`` (as a network cut or a take-over does) while a turn is
held open by the gate agent (``gate_agent.py``: a FIFO the test opens to let the turn go on)."""

from __future__ import annotations

import os
import select
import signal
import sys
from pathlib import Path
from typing import Any

import psycopg

from acp_bridge.pgstore.lease import lock_holder
from acp_bridge.pgstore.store import PgStore
from tests.host.cli_client import finish, start_serve
from tests.pg.test_serve_pg import wait_for_state

GATE_AGENT = [sys.executable, "-u", str(Path(__file__).with_name("gate_agent.py")), "--quiet"]


def _text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def _host_sessions(url: str, store: PgStore, conversation_id: str) -> tuple[int, list[int]]:
    """The owner's lease session (the lock holder) and its other sessions (data, listener)."""
    holder = lock_holder(store._data, conversation_id)
    assert holder is not None
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s", (holder,)
        ).fetchone()
        assert row is not None and row[0].startswith("acp-bridge:")
        others = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> %s",
            (row[0], holder),
        ).fetchall()
    return holder, [pid for (pid,) in others]


def _terminate(url: str, pids: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def _agent_pid(log: Path) -> int:
    return int(log.read_text().split()[0])


def _wait_gone(pid: int, timeout: float = 30) -> None:
    """Wait for process ``pid`` (not our child) to end: a pidfd turns readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        assert readable, f"process {pid} is still running after {timeout} s"
    finally:
        os.close(fd)


def _open_gate(fifo: Path) -> None:
    """Let the turn waiting at ``fifo`` go on (opening it for writing wakes the reader)."""
    os.close(os.open(fifo, os.O_WRONLY))


def _wait_ready(fifo: Path, timeout: float = 60) -> None:
    """Wait for the turn to reach its ``ready`` step (it writes a byte into ``fifo``)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        assert readable, f"the turn did not get to its ready step within {timeout} s"
    finally:
        os.close(fd)


def test_the_data_session_lost_mid_turn_is_opened_again_and_the_turn_goes_on(
    pg_url: str, tmp_path: Path
) -> None:
    fifo, ready, log = tmp_path / "gate", tmp_path / "ready", tmp_path / "prompts.log"
    os.mkfifo(fifo)
    os.mkfifo(ready)
    host = start_serve(
        "--store", pg_url, "--socket", str(tmp_path / "s" / "host.sock"), "--", *GATE_AGENT
    )
    stderr = ""
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(
                agent={"argv": [*GATE_AGENT, "--prompt-log", str(log)]},
                cwd=str(tmp_path),
                now=1.0,
            )
            program = f"log; ready {ready}; gate {fifo}; echo done"
            other.add_message(record.id, _text(program), now=2.0)
            _wait_ready(ready)
            holder, others = _host_sessions(pg_url, other, record.id)
            assert others  # its data session and its listener
            _terminate(pg_url, others)
            _open_gate(fifo)
            wait_for_state(pg_url, other, record.id, 1, "done")
            assert lock_holder(other._data, record.id) == holder  # still the owner
            # The listener is back: a message committed elsewhere still wakes the owner.
            other.add_message(record.id, _text("again"), now=3.0)
            wait_for_state(pg_url, other, record.id, 2, "done")
            assert [m.attempts for m in other.messages(record.id)] == [1, 1]
    finally:
        stderr = finish(host, signal.SIGTERM)
    assert "Traceback" not in stderr, stderr


def test_a_lost_lease_stops_the_local_turn_at_once_and_the_next_owner_takes_over(
    pg_url: str, tmp_path: Path
) -> None:
    fifo, ready, log = tmp_path / "gate", tmp_path / "ready", tmp_path / "prompts.log"
    os.mkfifo(fifo)
    os.mkfifo(ready)
    host = start_serve(
        "--store", pg_url, "--socket", str(tmp_path / "s" / "host.sock"), "--", *GATE_AGENT
    )
    stderr = ""
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(
                agent={"argv": [*GATE_AGENT, "--prompt-log", str(log)]},
                cwd=str(tmp_path),
                now=1.0,
            )
            program = f"log; ready {ready}; gate {fifo}; echo done"
            other.add_message(record.id, _text(program), now=2.0)
            _wait_ready(ready)
            holder, _ = _host_sessions(pg_url, other, record.id)
            agent = _agent_pid(log)
            _terminate(pg_url, [holder])  # its lease is gone: the next heartbeat says so
            _wait_gone(agent)  # the turn was cut and its agent stopped, unasked
            message = other.get_message(record.id, 1)
            assert message is not None and message.state.value == "running"  # nothing written
            other.own(record.id)  # the next owner
            assert other.recover_after_crash(record.id, now=5.0) == [1]
            message = other.get_message(record.id, 1)
            assert message is not None and message.state.value == "failed"
            assert message.recoverable
    finally:
        stderr = finish(host, signal.SIGTERM)
    assert "Traceback" not in stderr, stderr
    assert "its lease was lost" in stderr


def test_a_run_whose_lease_is_lost_cuts_its_turn_and_ends(pg_url: str, tmp_path: Path) -> None:
    """``run`` on PostgreSQL: its lease session ended (as a take-over does) -> the turn is cut
    at once and the run ends, exit 4, saying so; nothing more is written."""
    import subprocess

    from tests.host.cli_client import ENV

    fifo, ready = tmp_path / "gate", tmp_path / "ready"
    os.mkfifo(fifo)
    os.mkfifo(ready)
    with PgStore.open(pg_url):
        pass  # the schema, before the run and the test look
    run = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--store", pg_url,
         "-m", f"ready {ready}; gate {fifo}; echo never-recorded", "--", *GATE_AGENT],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=ENV, cwd=tmp_path,
    )  # fmt: skip
    try:
        _wait_ready(ready)
        with PgStore.open(pg_url) as other:
            (record,) = other.list_conversations()
            holder = lock_holder(other._data, record.id)
            assert holder is not None
            _terminate(pg_url, [holder])
            stdout, stderr = run.communicate(timeout=60)
            assert run.returncode == 4, stderr
            assert "was lost (another host owns it now)" in stderr
            message = other.get_message(record.id, 1)
            assert message is not None and message.state.value == "running"  # for the next owner
            assert "never-recorded" not in stdout
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
