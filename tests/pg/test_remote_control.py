"""Issue 23: ``acp-bridge cancel`` and ``stop`` reach an owner on another host through the
database: a stored request (the ``control`` table) the owner acts on at each notification and
after its listener reconnects, and answers; the verb prints the answer (the cancelled seq).

Each test runs a real ``serve`` against the real server; its turn is held open by the gate
agent until the test lets it go. The verbs run where no host answers (another machine)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from acp_bridge.pgstore.notify import CONTROL_ANSWER_CHANNEL
from acp_bridge.pgstore.store import PgStore
from tests.host.cli_client import ENV, ROOT, finish, start_serve
from tests.pg.test_connection_loss import GATE_AGENT, _text, _wait_ready
from tests.pg.test_serve_pg import wait_for_state


@contextmanager
def _elsewhere() -> Iterator[dict[str, str]]:
    """The environment of a shell on another machine: no host's socket to find."""
    state = Path(tempfile.mkdtemp(prefix="acpb-"))
    try:
        yield {**ENV, "XDG_STATE_HOME": str(state), "XDG_RUNTIME_DIR": ""}
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _verb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip


@contextmanager
def _host_running_a_held_turn(
    pg_url: str, tmp_path: Path, queued: int = 1
) -> Iterator[tuple[PgStore, str]]:
    """A host whose conversation runs message 1 (held open for 120 s) with ``queued``
    messages behind it; yields another host's store and the conversation's id."""
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    host = start_serve(
        "--store", pg_url, "--socket", str(tmp_path / "s" / "host.sock"), "--", *GATE_AGENT
    )
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(
                agent={"argv": GATE_AGENT}, cwd=str(tmp_path), now=1.0
            )
            other.add_message(record.id, _text(f"ready {ready}; wait 120"), now=2.0)
            for index in range(queued):
                other.add_message(record.id, _text(f"after {index}"), now=3.0 + index)
            _wait_ready(ready)
            yield other, record.id
    finally:
        stderr = finish(host, signal.SIGTERM)
        assert "Traceback" not in stderr, stderr


def _terminate_listeners(pg_url: str) -> int:
    """End every session waiting in LISTEN (the host's listener, as a network cut would)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def test_cancel_through_another_host_is_answered_with_the_cancelled_seq(
    pg_url: str, tmp_path: Path
) -> None:
    with _host_running_a_held_turn(pg_url, tmp_path) as (other, cid), _elsewhere() as env:
        cancel = _verb(env, "cancel", "--store", pg_url, cid)
        assert cancel.returncode == 0, cancel.stderr
        assert cancel.stdout == "1\n", cancel.stderr
        assert "asked it through the store to cancel" in cancel.stderr
        assert f"cancelled message 1 of conversation {cid}" in cancel.stderr
        wait_for_state(pg_url, other, cid, 1, "cancelled")
        wait_for_state(pg_url, other, cid, 2, "done")  # the queue went on


def test_stop_through_another_host_cancels_the_turn_and_keeps_the_queue_paused(
    pg_url: str, tmp_path: Path
) -> None:
    with _host_running_a_held_turn(pg_url, tmp_path, queued=2) as (other, cid):
        with _elsewhere() as env:
            stop = _verb(env, "stop", "--store", pg_url, cid)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout == "1\n", stop.stderr
        assert "message 1 cancelled; 2 queued messages stay queued" in stop.stderr, stop.stderr
        wait_for_state(pg_url, other, cid, 1, "cancelled")
        record = other.get_conversation(cid)
        assert record is not None and record.paused
        # The answer came once the queue was paused: nothing was started since.
        assert [m.state.value for m in other.messages(cid)] == ["cancelled", "queued", "queued"]
        other.add_message(cid, _text("go on"), unpause=True, now=10.0)  # a send resumes
        wait_for_state(pg_url, other, cid, 4, "done")
        assert [m.state.value for m in other.messages(cid)][1:] == ["done", "done", "done"]


def test_a_request_stored_while_the_listener_was_away_is_carried_out_when_it_reconnects(
    pg_url: str, tmp_path: Path
) -> None:
    with _host_running_a_held_turn(pg_url, tmp_path) as (other, cid):
        # Stored as the verb stores it, but its notification lost (as when the owner's
        # listener is reconnecting): the row is all there is.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "INSERT INTO control (conversation_id, kind, seq) VALUES (%s, 'stop', 1)"
                " RETURNING id",
                (cid,),
            ).fetchone()
        assert row is not None
        assert _terminate_listeners(pg_url) >= 1
        answer = _wait_answered(pg_url, other, row[0])
        assert answer == {"cancelled": True, "seq": 1, "queued": 1}
        wait_for_state(pg_url, other, cid, 1, "cancelled")


def test_a_cancel_sent_while_the_owners_listener_connection_is_killed_is_still_carried_out(
    pg_url: str, tmp_path: Path
) -> None:
    with _host_running_a_held_turn(pg_url, tmp_path) as (other, cid), _elsewhere() as env:
        assert _terminate_listeners(pg_url) >= 1
        cancel = _verb(env, "cancel", "--store", pg_url, cid)
        assert cancel.returncode == 0, cancel.stderr
        assert cancel.stdout == "1\n", cancel.stderr
        wait_for_state(pg_url, other, cid, 1, "cancelled")


def test_stop_with_no_owner_pauses_the_conversation_in_the_store(
    pg_url: str, tmp_path: Path
) -> None:
    with PgStore.open(pg_url) as other, _elsewhere() as env:
        record = other.create_conversation(agent={"argv": GATE_AGENT}, cwd=str(tmp_path), now=1.0)
        other.add_message(record.id, _text("one"), now=2.0)
        other.add_message(record.id, _text("two"), now=3.0)
        stop = _verb(env, "stop", "--store", pg_url, record.id)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout == ""
        assert "no live owner: stopped conversation" in stop.stderr
        assert "nothing was running; 2 queued messages stay queued" in stop.stderr
        stored = other.get_conversation(record.id)
        assert stored is not None and stored.paused
        assert not other.is_owned(record.id)  # the lease was let go


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
            # cancel and stop through host B (which does not own it) reach A through the store
            for verb in ("cancel", "stop"):
                asked = subprocess.run(
                    [sys.executable, "-m", "acp_bridge", verb, "--store", pg_url,
                     "--socket", str(socket_b), record.id],
                    capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60,
                )  # fmt: skip
                assert asked.returncode == 0, asked.stderr
                assert "nothing was running" in asked.stderr, asked.stderr
    finally:
        stderr_a = finish(host_a, signal.SIGTERM)
        stderr_b = finish(host_b, signal.SIGTERM) if host_b is not None else ""
    assert "Traceback" not in stderr_a + stderr_b, stderr_a + stderr_b


def test_status_of_a_conversation_owned_by_another_host_names_it_and_the_stored_queue(
    pg_url: str, tmp_path: Path
) -> None:
    held = _host_running_a_held_turn(pg_url, tmp_path, queued=2)
    with held as (other, cid), _elsewhere() as env:
        shown = _verb(env, "status", "--store", pg_url, cid, "--json")
        assert shown.returncode == 0, shown.stderr
        row = json.loads(shown.stdout)
        assert row["agentState"] == "owned by another host"
        assert row["runningSeq"] == 1 and row["queueDepth"] == 2  # the store's queue
        owner = row["owner"]
        assert owner["host"] == socket.gethostname() and isinstance(owner["pid"], int)
        assert owner["tag"].startswith(f"{owner['host']}:{owner['pid']}:")
        assert owner["heartbeatAgeS"] < 60
        table = _verb(env, "status", "--store", pg_url, cid)
        assert table.returncode == 0, table.stderr
        assert "owned by another host" in table.stdout
        assert f"is owned by another host: host {owner['host']} (process {owner['pid']})" in (
            table.stderr
        )
        # The held turn ends before the host does (a host stopped mid-turn waits out its agent's
        # grace window, 14 s here: not what this test is about).
        assert _verb(env, "cancel", "--store", pg_url, cid).returncode == 0
        wait_for_state(pg_url, other, cid, 3, "done")


def test_a_stop_stored_for_an_owner_that_died_is_carried_out_by_the_next_owner(
    pg_url: str, tmp_path: Path
) -> None:
    ready, log = tmp_path / "ready", tmp_path / "prompts.log"
    os.mkfifo(ready)
    argv = [*GATE_AGENT, "--prompt-log", str(log)]
    host_a = start_serve(
        "--store", pg_url, "--socket", str(tmp_path / "a" / "host.sock"), "--", *argv
    )
    host_b = None
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(agent={"argv": argv}, cwd=str(tmp_path), now=1.0)
            other.add_message(record.id, _text(f"log; ready {ready}; wait 120"), now=2.0)
            other.add_message(record.id, _text("after"), now=3.0)
            _wait_ready(ready)
            with psycopg.connect(pg_url, autocommit=True) as conn:  # its notification lost
                row = conn.execute(
                    "INSERT INTO control (conversation_id, kind) VALUES (%s, 'stop') RETURNING id",
                    (record.id,),
                ).fetchone()
            assert row is not None
            host_a.send_signal(signal.SIGKILL)  # it never acts on it
            host_a.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):  # its agent, if it outlived it
                os.killpg(int(log.read_text().split()[0]), signal.SIGKILL)
            host_b = start_serve(
                "--store", pg_url, "--socket", str(tmp_path / "b" / "host.sock"), "--", *argv
            )  # takes the conversation (a message was left running): the stop is pending
            wait_for_state(pg_url, other, record.id, 1, "failed")  # cut by A's death
            answer = _wait_answered(pg_url, other, row[0])
            stored = other.get_conversation(record.id)
            assert stored is not None and stored.paused
            if answer["cancelled"]:  # B had started message 2 already: the stop cancelled it
                assert answer == {"cancelled": True, "seq": 2, "queued": 0}
                wait_for_state(pg_url, other, record.id, 2, "cancelled")
            else:  # the stop came first: B started nothing
                assert answer == {"cancelled": False, "queued": 1}
                second = other.get_message(record.id, 2)
                assert second is not None and second.state.value == "queued"
    finally:
        with contextlib.suppress(ProcessLookupError):
            host_a.kill()
        finish(host_a, signal.SIGTERM)
        stderr_b = finish(host_b, signal.SIGTERM) if host_b is not None else ""
    assert "Traceback" not in stderr_b, stderr_b


def _wait_answered(pg_url: str, store: PgStore, request_id: int) -> dict[str, object]:
    """Wait, woken by the owner's answer notifications (never a sleep), until request
    ``request_id`` is answered; 60 s at most."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"LISTEN {CONTROL_ANSWER_CHANNEL}")
        answer = store.control_outcome(request_id)
        if answer is not None:
            return answer
        for _notification in conn.notifies(timeout=60):
            answer = store.control_outcome(request_id)
            if answer is not None:
                return answer
    raise AssertionError(f"request {request_id} was never answered")


def test_stop_through_the_database_reaches_a_run_that_owns_the_conversation(
    pg_url: str, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    with PgStore.open(pg_url):
        pass  # the schema, before the run and the test look
    run = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--store", pg_url,
         "-m", f"ready {ready}; wait 120", "-m", "echo after", "--", *GATE_AGENT],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=ENV, cwd=tmp_path,
    )  # fmt: skip
    try:
        _wait_ready(ready)
        with PgStore.open(pg_url) as other, _elsewhere() as env:
            (record,) = other.list_conversations()
            stop = _verb(env, "stop", "--store", pg_url, record.id)
            assert stop.returncode == 0, stop.stderr
            assert stop.stdout == "1\n", stop.stderr
            assert "message 1 cancelled; 1 queued message stays queued" in stop.stderr
            _, stderr = run.communicate(timeout=60)
            assert run.returncode == 4, stderr  # message 2 was left queued, paused
            assert "Traceback" not in stderr, stderr
            states = [m.state.value for m in other.messages(record.id)]
            assert states == ["cancelled", "queued"]
            stored = other.get_conversation(record.id)
            assert stored is not None and stored.paused
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
