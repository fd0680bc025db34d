"""Issue 23, found while writing the take-over benchmark: a message sent while its owner is
unreachable but its lease still looks held must run once the owner is stale, unasked.

Host A owns a conversation and is stopped (SIGSTOP: a host whose machine vanished keeps its
database sessions, and so its lease, until the server notices). A message is sent through host
B: B does not own the conversation (A's heartbeat is fresh), so it is committed to the store
(``acp-bridge send`` does so on B's ``ownedElsewhere``) and B is notified, and refuses again.
No notification comes after that: B's sweep for unfinished conversations no live host holds
(``serve.ORPHAN_SWEEP_S``) takes the conversation once A's heartbeat is stale
(``$ACP_BRIDGE_LEASE_STALE_S``, set to 3 s for both hosts here) and runs the message (it used
to stay queued until the next send).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg

from acp_bridge.host.client import text_content
from acp_bridge.host.serve import ORPHAN_SWEEP_S
from acp_bridge.pgstore.lease import STALE_ENV
from acp_bridge.pgstore.notify import EVENTS_CHANNEL
from acp_bridge.pgstore.store import PgStore
from tests.host.cli_client import agent, finish, start_serve
from tests.pg.test_serve_pg import wait_for_state

STALE_S = 3.0
"""The hosts' stale limit here (15 s by default): the same take-over, sooner."""
HOSTS_ENV = {STALE_ENV: f"{STALE_S:g}"}


def _wait_state_until(
    url: str, store: PgStore, conversation_id: str, seq: int, state: str, deadline_s: float
) -> str | None:
    """Message ``seq``'s state once it is ``state`` or ``deadline_s`` passed (woken by the
    event log's notifications)."""
    deadline = time.monotonic() + deadline_s
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {EVENTS_CHANNEL}")
        while True:
            message = store.get_message(conversation_id, seq)
            found = None if message is None else message.state.value
            left = deadline - time.monotonic()
            if found == state or left <= 0:
                return found
            for _ in conn.notifies(timeout=min(left, 1.0)):
                break


def test_a_message_sent_while_the_owner_is_unreachable_runs_once_the_owner_is_stale(
    pg_url: str, tmp_path: Path
) -> None:
    echo = agent("echo_agent.py")
    host_a = start_serve("--store", pg_url, "--socket", str(tmp_path / "a" / "host.sock"), "--",
                         *echo, env=HOSTS_ENV)  # fmt: skip
    host_b = None
    try:
        with PgStore.open(pg_url) as other:
            record = other.create_conversation(agent={"argv": echo}, cwd=str(tmp_path), now=1.0)
            other.add_message(record.id, text_content("echo first"), now=2.0)
            wait_for_state(pg_url, other, record.id, 1, "done")  # A took it and owns it
            host_a.send_signal(signal.SIGSTOP)
            host_b = start_serve("--store", pg_url, "--socket", str(tmp_path / "b" / "host.sock"),
                                 "--", *echo, env=HOSTS_ENV)  # fmt: skip
            # What `acp-bridge send` does when B answers ownedElsewhere; B is notified.
            other.add_message(record.id, text_content("echo second"), unpause=True, now=3.0)
            limit = STALE_S + ORPHAN_SWEEP_S + 10
            state = _wait_state_until(pg_url, other, record.id, 2, "done", limit)
            assert state == "done", f"message 2 is {state} {limit:g} s later"
    finally:
        host_a.send_signal(signal.SIGCONT)
        finish(host_a, signal.SIGTERM)
        if host_b is not None:
            finish(host_b, signal.SIGTERM)
