"""``acp-bridge cancel`` and ``acp-bridge status``: through the host, from the store when no
owner is live, and the host's misbehaviour (issue 22)."""

from __future__ import annotations

import json

from acp_bridge.conversation.store import QueueStore
from tests.verbs.fake_hosts import fake_host, make_store, short_dir, verb


def test_cancel_prints_the_cancelled_message() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=store) as host:
            result = verb("cancel", "c-fake", "--store", str(store), "--socket", str(host.socket))
            methods = host.methods()
        assert result.returncode == 0, result.stderr
        assert result.stdout == "3\n"
        assert "cancelled message 3 of conversation c-fake" in result.stderr
        assert "_acp_bridge/cancel" in methods


def test_cancel_with_no_owner_says_nothing_runs() -> None:
    with short_dir() as d:
        store = make_store(d)
        result = verb("cancel", "c-fake", "--store", str(store), "--socket", str(d / "no.sock"))
        assert result.returncode == 0, result.stderr
        assert result.stdout == ""
        assert "nothing is running to cancel" in result.stderr


def test_cancel_against_a_silent_host_is_exit_3() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--fail", "_acp_bridge/cancel:silent", store=store) as host:
            result = verb("cancel", "c-fake", "--store", str(store), "--socket", str(host.socket),
                          "--timeout", "0.5")  # fmt: skip
        assert result.returncode == 3
        assert "did not answer in 0.5 s (_acp_bridge/cancel)" in result.stderr


def test_status_lists_the_hosts_conversations() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=store) as host:
            table = verb("status", "--store", str(store), "--socket", str(host.socket))
            rows = verb("status", "--json", "--store", str(store), "--socket", str(host.socket))
            one = verb("status", "c-f", "--json", "--store", str(store), "--socket",
                       str(host.socket))  # fmt: skip
        assert table.returncode == 0, table.stderr
        header, line = table.stdout.splitlines()
        assert header.split() == ["ID", "STATE", "PID", "QUEUED", "RUNNING", "CLIENTS", "AGENT"]
        assert line.split() == ["c-fake", "running", "4242", "2", "3", "1", "echo"]
        row = json.loads(rows.stdout)
        assert row["queueDepth"] == 2 and row["runningSeq"] == 3 and row["clients"] == 1
        assert row["owner"]["socket"] == str(host.socket)
        assert json.loads(one.stdout)["conversationId"] == "c-fake"


def test_status_with_no_host_reads_the_store_marked_no_host() -> None:
    with short_dir() as d:
        store = make_store(d)
        with QueueStore.open(store) as opened:
            for text in ("a", "b"):
                opened.add_message("c-fake", [{"type": "text", "text": text}], now=2.0)
        result = verb("status", "--json", "--store", str(store), "--socket", str(d / "no.sock"))
        one = verb("status", "c-fake", "--store", str(store), "--socket", str(d / "no.sock"))
        assert result.returncode == 0, result.stderr
        row = json.loads(result.stdout)
        assert row["agentState"] == "no host" and row["owner"] is None
        assert row["queueDepth"] == 2 and row["runningSeq"] is None
        assert one.returncode == 0, one.stderr
        assert one.stdout.splitlines()[1].split()[:4] == ["c-fake", "no", "host", "-"]


def test_status_against_a_host_that_answers_garbage_is_exit_3() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--fail", "_acp_bridge/status:garbage", store=store) as host:
            result = verb("status", "--store", str(store), "--socket", str(host.socket),
                          "--timeout", "0.5")  # fmt: skip
        assert result.returncode == 3
        assert "not JSON-RPC" in result.stderr
        assert result.stdout == ""


def test_status_of_a_conversation_the_host_does_not_hold_is_the_stores_marked_not_open() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--fail", "_acp_bridge/status:notfound", store=store) as host:
            result = verb("status", "c-fake", "--json", "--store", str(store), "--socket",
                          str(host.socket))  # fmt: skip
        assert result.returncode == 0, result.stderr
        row = json.loads(result.stdout)
        assert row["agentState"] == "not open" and row["owner"] is None
