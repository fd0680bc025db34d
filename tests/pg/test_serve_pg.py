"""``acp-bridge serve --store postgresql://...``: a message committed by another host (here the
test, through its own PgStore, as ``send`` through any host does) wakes the serving host by
LISTEN/NOTIFY; it takes the conversation nobody owns, runs the turn, and holds the lease while
it serves; a conversation it owns is refused to another host."""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

from acp_bridge.conversation.store_api import ConversationOwnedError
from acp_bridge.pgstore.notify import EVENTS_CHANNEL
from acp_bridge.pgstore.store import PgStore
from tests.host.cli_client import agent, finish, start_serve


def _text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def wait_for_state(url: str, store: PgStore, conversation_id: str, seq: int, state: str) -> None:
    """Wait, woken by the event log's notifications (never a sleep), until message ``seq``
    is in ``state``; 60 s at most."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {EVENTS_CHANNEL}")
        message = store.get_message(conversation_id, seq)
        if message is not None and message.state.value == state:
            return
        for _notification in conn.notifies(timeout=60):
            message = store.get_message(conversation_id, seq)
            if message is not None and message.state.value == state:
                return
    raise AssertionError(f"message {seq} is {message and message.state.value}, not {state}")


def test_a_message_sent_through_another_host_is_run_by_the_serving_host(
    pg_url: str, tmp_path: Path
) -> None:
    socket_path = tmp_path / "s" / "host.sock"
    echo = agent("echo_agent.py")
    host = start_serve("--store", pg_url, "--socket", str(socket_path), "--", *echo)
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(agent={"argv": echo}, cwd=str(tmp_path), now=1.0)
            other.add_message(record.id, _text("hello"), now=2.0)  # commits and notifies
            wait_for_state(pg_url, other, record.id, 1, "done")
            # The serving host owns it now: another host may queue into it, not run it.
            with pytest.raises(ConversationOwnedError):
                other.own(record.id)
            other.add_message(record.id, _text("again"), now=3.0)
            wait_for_state(pg_url, other, record.id, 2, "done")
            assert [m.attempts for m in other.messages(record.id)] == [1, 1]
    finally:
        stderr = finish(host, signal.SIGTERM)
    assert "Traceback" not in stderr, stderr
    with PgStore.open(pg_url) as after:
        after.own(record.id)  # the host let its lease go when it stopped


def test_send_through_any_host_commits_and_wakes_the_owner(pg_url: str, tmp_path: Path) -> None:
    """``acp-bridge send --store URL`` with no host answering here commits the message (and
    notifies); the host that serves the database elsewhere runs it. ``conversations`` and
    ``show`` read the same database."""
    import subprocess
    import sys

    from acp_bridge.pgstore.url import redact
    from tests.host.cli_client import ENV, ROOT

    socket_path = tmp_path / "elsewhere" / "host.sock"  # not where send looks: another host
    echo = agent("echo_agent.py")
    host = start_serve("--store", pg_url, "--socket", str(socket_path), "--", *echo)
    state = Path(tempfile.mkdtemp(prefix="acpb-"))  # short: a Unix socket's path is bounded
    env = {**ENV, "XDG_STATE_HOME": str(state), "XDG_RUNTIME_DIR": ""}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "acp_bridge", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )

    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(agent={"argv": echo}, cwd=str(tmp_path), now=1.0)
            sent = cli("send", "--store", pg_url, record.id, "-m", "from afar")
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.split() == ["1"]
            # The store is named as given (password masked), never by its internal place.
            assert f"stored in {redact(pg_url)}" in sent.stderr, sent.stderr
            wait_for_state(pg_url, other, record.id, 1, "done")
        listed = cli("conversations", "--store", pg_url)
        assert listed.returncode == 0, listed.stderr
        assert record.id[:8] in listed.stdout
        shown = cli("show", "--store", pg_url, record.id)
        assert shown.returncode == 0, shown.stderr
        assert "from afar" in shown.stdout
        status = cli("status", "--store", pg_url, record.id)
        assert status.returncode == 0, status.stderr
        assert record.id in status.stdout
        # watch follows the shared log while the host owns the conversation.
        watch = subprocess.Popen(
            [sys.executable, "-m", "acp_bridge", "watch", "--store", pg_url, "--json", record.id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        try:
            assert watch.stdout is not None
            with PgStore.open(pg_url) as other:
                other.add_message(record.id, _text("echo live one"), now=5.0)
            lines = []
            for line in watch.stdout:  # the stored events, then the live ones
                lines.append(line)
                if "live one" in line:
                    break
            stderr = finish(host, signal.SIGTERM)  # nobody owns it now: the watch ends itself
            assert watch.wait(timeout=30) == 0
            assert watch.stderr is not None
            assert "no host owns conversation" in watch.stderr.read()
        finally:
            watch.kill()
            watch.wait()
            for pipe in (watch.stdout, watch.stderr):
                if pipe is not None:
                    pipe.close()
    finally:
        if host.returncode is None:
            stderr = finish(host, signal.SIGTERM)
        shutil.rmtree(state, ignore_errors=True)
    assert "Traceback" not in stderr, stderr
