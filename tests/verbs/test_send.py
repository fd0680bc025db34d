"""``acp-bridge send``: through the host, through a run's own endpoint (its lock names it), and
with no owner at all (committed to the store for the next owner), plus each way an owner can
fail it (issue 22)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from acp_bridge.conversation.store import QueueStore
from tests.verbs.fake_hosts import ECHO, fake_host, make_store, owning, short_dir, verb


def sent(host_messages: list[dict[str, object]]) -> list[object]:
    return [m["params"] for m in host_messages if m.get("method") == "_acp_bridge/send"]


def test_send_goes_to_the_host_and_prints_each_seq() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--first-seq", "5", store=store) as host:
            result = verb(
                "send", "c-fake", "-m", "one", "-m", "two", "--interrupt",
                "--store", str(store), "--socket", str(host.socket),
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert result.stdout.split() == ["5", "6"]
            assert result.stderr == ""
            params = sent(host.received())
        assert [p["content"] for p in params] == [  # type: ignore[index]
            [{"type": "text", "text": "one"}],
            [{"type": "text", "text": "two"}],
        ]
        assert all(p["interrupt"] is True for p in params)  # type: ignore[index]


def test_send_reaches_the_owner_its_lock_names_before_the_host() -> None:
    with short_dir() as d:
        store = make_store(d)
        owner_dir = d / "owner"
        owner_dir.mkdir(mode=0o700)
        with fake_host(owner_dir, store=store) as owner, owning(store, "c-fake", owner.socket):
            result = verb(
                "send", "c-f", "-m", "hi", "--steer",
                "--store", str(store), "--socket", str(d / "no-host.sock"),
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert sent(owner.received())[0]["steer"] is True  # type: ignore[index]


def test_with_no_owner_the_message_is_stored_and_the_next_run_prompts_it() -> None:
    with short_dir() as d:
        store = make_store(d)
        result = verb(
            "send", "c-fake", "-m", "echo from send",
            "--store", str(store), "--socket", str(d / "none.sock"),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["1"]
        assert "no live owner of conversation c-fake" in result.stderr
        assert "queued for the next owner" in result.stderr
        with QueueStore.open(store, read_only=True) as opened:
            assert [m.seq for m in opened.queued("c-fake")] == [1]
        run = verb("run", "--json", "--store", str(store), "--conversation", "c-fake", "--", *ECHO)
        assert run.returncode == 0, run.stderr
        events = [json.loads(line) for line in run.stdout.splitlines()]
        started = [e["text"] for e in events if e["event"] == "turn_started"]
        assert started == ["echo from send"]


def test_steering_with_no_owner_is_queued_and_said_so() -> None:
    with short_dir() as d:
        store = make_store(d)
        result = verb("send", "c-fake", "-m", "x", "--steer", "--store", str(store), "--socket",
                      str(d / "none.sock"))  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "not steered" in result.stderr


def test_a_live_owner_without_an_endpoint_is_named_and_the_message_stored() -> None:
    with short_dir() as d:
        store = make_store(d)
        with owning(store, "c-fake", None):
            result = verb("send", "c-fake", "-m", "x", "--store", str(store), "--socket",
                          str(d / "none.sock"))  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"owned by process {os.getpid()}, which serves no endpoint" in result.stderr


def test_an_unknown_conversation_is_a_usage_error() -> None:
    with short_dir() as d:
        store = make_store(d)
        result = verb("send", "nope", "-m", "x", "--store", str(store))
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            f"acp-bridge send: no stored conversation 'nope' in {store}"
        ]


def test_each_misbehaviour_of_the_host_is_one_line_and_exit_3() -> None:
    cases = {
        "close": "closed the connection before answering (_acp_bridge/send)",
        "garbage": "did not answer in 0.5 s (_acp_bridge/send); it sent a line that is not",
        "silent": "did not answer in 0.5 s (_acp_bridge/send)",
        "error": "refused _acp_bridge/send: the host failed",
    }
    for how, expected in cases.items():
        with short_dir() as d:
            store = make_store(d)
            with fake_host(d, "--fail", f"_acp_bridge/send:{how}", store=store) as host:
                result = verb("send", "c-fake", "-m", "x", "--store", str(store), "--socket",
                              str(host.socket), "--timeout", "0.5")  # fmt: skip
            assert result.returncode == 3, (how, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and expected in lines[0], (how, lines)
            assert "Traceback" not in result.stderr
            with QueueStore.open(store, read_only=True) as opened:
                assert opened.queued("c-fake") == []  # never committed here as well


def test_a_host_of_another_store_is_refused_with_exit_2() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=Path("/elsewhere/s.db")) as host:
            result = verb("send", "c-fake", "-m", "x", "--store", str(store), "--socket",
                          str(host.socket))  # fmt: skip
        assert result.returncode == 2
        assert "serves the store /elsewhere/s.db, not" in result.stderr


def test_a_socket_path_too_long_for_a_unix_socket_means_no_host() -> None:
    """A path over 107 bytes can hold no socket (``serve`` refuses it): the verbs go on as
    with no host, and say so in one line (it used to be a bare "OSError", exit 3)."""
    with short_dir() as d:
        store = make_store(d)
        long_socket = d / ("s" * 120) / "host.sock"
        result = verb("send", "c-fake", "-m", "x", "--store", str(store), "--socket",
                      str(long_socket))  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["1"]
        assert "queued for the next owner" in result.stderr
        assert "OSError" not in result.stderr
        status = verb("status", "--store", str(store), "--socket", str(long_socket))
        assert status.returncode == 0, status.stderr
        assert "OSError" not in status.stderr and "c-fake" in status.stdout
        served = verb("serve", "--store", str(store), "--socket", str(long_socket))
        assert served.returncode != 0
        assert "longer than a Unix socket allows (107 bytes)" in served.stderr
        assert "Traceback" not in served.stderr
