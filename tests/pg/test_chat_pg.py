"""Issue 23: ``chat`` on PostgreSQL, on a pty that is its controlling terminal: when its lease is
lost (its lease session ended, as a take-over does) the running turn is cut at once, one line
says so, and the chat ends, exit 4, writing nothing more (the next owner ends the cut message
failed and recoverable)."""

from __future__ import annotations

import os
from pathlib import Path

from acp_bridge.pgstore.lease import lock_holder
from acp_bridge.pgstore.store import PgStore
from tests.e2e.test_chat import chat
from tests.pg.test_connection_loss import GATE_AGENT, _terminate, _wait_ready
from tests.pg.test_remote_control import _elsewhere, _verb


def test_a_chat_whose_lease_is_lost_cuts_its_turn_and_ends(pg_url: str, tmp_path: Path) -> None:
    fifo, ready = tmp_path / "gate", tmp_path / "ready"
    os.mkfifo(fifo)
    os.mkfifo(ready)
    with PgStore.open(pg_url):
        pass  # the schema, before the chat and the test look
    with chat(["--store", pg_url, "--", *GATE_AGENT], tmp_path) as terminal:
        terminal.read_until(b"/help lists the commands")
        terminal.say(f"ready {ready}; gate {fifo}; echo never-recorded")
        _wait_ready(ready)
        with PgStore.open(pg_url) as other:
            (record,) = other.list_conversations()
            holder = lock_holder(other._data, record.id)
            assert holder is not None
            _terminate(pg_url, [holder])
            terminal.read_until(
                f"the lease of conversation {record.id} was lost (another host owns it now); "
                "message 1 was cut; leaving".encode()
            )
            assert terminal.finish(timeout=60) == 4
            assert b"Traceback" not in terminal.seen, terminal.seen[-2000:]
            message = other.get_message(record.id, 1)
            assert message is not None and message.state.value == "running"  # for the next owner
            kinds = [(e.kind, e.seq) for e in other.events(record.id)]
            assert ("turn_started", 1) in kinds and ("turn_ended", 1) not in kinds
            assert not other.is_owned(record.id)  # nobody holds it: the next owner may take it


def test_a_stop_through_the_database_reaches_a_chat_and_its_status_line_says_paused(
    pg_url: str, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    with PgStore.open(pg_url):
        pass  # the schema, before the chat and the test look
    with chat(["--store", pg_url, "--", *GATE_AGENT], tmp_path) as terminal:
        terminal.read_until(b"/help lists the commands")
        terminal.say(f"ready {ready}; wait 120")
        _wait_ready(ready)
        terminal.say("echo after")
        terminal.read_until(b"queued as message 2")
        with PgStore.open(pg_url) as other, _elsewhere() as env:
            (record,) = other.list_conversations()
            stop = _verb(env, "stop", "--store", pg_url, record.id)
            assert stop.returncode == 0, stop.stderr
            assert stop.stdout == "1\n", stop.stderr
            terminal.read_until(b"1 queued (paused: /resume sends them)")
            terminal.say("/quit")
            assert terminal.finish(timeout=60) == 0
            states = [m.state.value for m in other.messages(record.id)]
            assert states == ["cancelled", "queued"]
