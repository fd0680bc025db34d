"""``acp-bridge watch``: replay then live through the owner, from a cursor, the store when no
owner is live, and each way the owner can fail it (issue 22)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from acp_bridge.conversation.store import QueueStore
from tests.verbs.fake_hosts import ENV, ROOT, fake_host, make_store, short_dir, verb


def test_json_replays_every_event_with_its_cursor_and_ends_when_the_conversation_closes() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--close-watch", store=store) as host:
            result = verb("watch", "c-fake", "--json", "--store", str(store), "--socket",
                          str(host.socket))  # fmt: skip
        assert result.returncode == 0, result.stderr
        events = [json.loads(line) for line in result.stdout.splitlines()]
        assert [e["cursor"] for e in events] == [1, 2, 3, 4, 5, 6, 7]
        assert [e["event"] for e in events][2:] == [
            "turn_started", "update", "update", "turn_ended", "conversation_closed",
        ]  # fmt: skip
        assert all("ts" in e for e in events)
        assert "conversation c-fake was closed" in result.stderr
        assert "last cursor 7" in result.stderr


def test_plain_output_is_the_agents_text_as_run_prints_it_and_from_skips_what_was_seen() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--close-watch", store=store) as host:
            result = verb("watch", "c-fake", "--from", "4", "--store", str(store), "--socket",
                          str(host.socket))  # fmt: skip
            watched = [m for m in host.received() if m.get("method") == "_acp_bridge/watch"]
        assert result.returncode == 0, result.stderr
        assert result.stdout == "world\n"
        assert watched[0]["params"] == {"conversationId": "c-fake", "from": 4}
        assert "[done] end_turn" in result.stderr  # the turn's structure, out of the text's way


def test_with_no_owner_the_stored_events_are_shown_and_the_watch_ends() -> None:
    with short_dir() as d:
        store = make_store(d)
        with QueueStore.open(store) as opened:
            opened.add_message("c-fake", [{"type": "text", "text": "q"}], now=2.0)
            opened.add_event("c-fake", "turn_started", {"seq": 1, "text": "q"}, seq=1, now=2.0)
            chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text",
                     "text": "stored reply"}}  # fmt: skip
            opened.add_event("c-fake", "update", {"seq": 1, "update": chunk}, seq=1, now=2.1)
        result = verb("watch", "c-fake", "--json", "--store", str(store), "--socket",
                      str(d / "none.sock"))  # fmt: skip
        assert result.returncode == 0, result.stderr
        events = [json.loads(line) for line in result.stdout.splitlines()]
        assert [e["event"] for e in events] == ["turn_started", "update"]
        assert events[1]["update"]["content"]["text"] == "stored reply"
        assert "no live owner of conversation c-fake" in result.stderr
        assert "nothing is following the conversation" in result.stderr
        again = verb("watch", "c-fake", "--json", "--from", str(events[0]["cursor"]),
                     "--store", str(store), "--socket", str(d / "none.sock"))  # fmt: skip
        assert [json.loads(x)["event"] for x in again.stdout.splitlines()] == ["update"]


def test_a_host_that_drops_the_watch_is_exit_3_naming_the_last_cursor() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--fail", "_acp_bridge/watch:close", store=store) as host:
            result = verb("watch", "c-fake", "--store", str(store), "--socket",
                          str(host.socket))  # fmt: skip
        assert result.returncode == 3, result.stderr
        assert "closed the connection before answering (_acp_bridge/watch)" in result.stderr
        assert "Traceback" not in result.stderr


def test_the_owner_going_away_mid_watch_ends_it_with_where_to_continue() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=store) as host:
            watch = subprocess.Popen(
                [sys.executable, "-m", "acp_bridge", "watch", "c-fake", "--json", "--store",
                 str(store), "--socket", str(host.socket)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV,
            )  # fmt: skip
            assert watch.stdout is not None
            for line in watch.stdout:  # the replay, up to the end of the turn
                if json.loads(line)["event"] == "turn_ended":
                    break
            host.process.kill()
            host.process.wait(timeout=30)
            _, err = watch.communicate(timeout=60)
        assert watch.returncode == 0, err
        assert "went away; nothing follows conversation c-fake now" in err
        assert "last cursor 6" in err


def test_sigint_ends_a_live_watch_with_130() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=store) as host:
            watch = subprocess.Popen(
                [sys.executable, "-m", "acp_bridge", "watch", "c-fake", "--json", "--store",
                 str(store), "--socket", str(host.socket)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV,
            )  # fmt: skip
            assert watch.stdout is not None
            for line in watch.stdout:
                if json.loads(line)["event"] == "turn_ended":
                    break
            watch.send_signal(signal.SIGINT)
            _, err = watch.communicate(timeout=60)
        assert watch.returncode == 130, err
        assert "Traceback" not in err


def test_a_watch_the_owner_cuts_off_is_exit_3_with_its_reason() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, "--cut-watch", "outbox over 64 MiB", store=store) as host:
            result = verb("watch", "c-fake", "--json", "--store", str(store), "--socket",
                          str(host.socket))  # fmt: skip
        assert result.returncode == 3, result.stderr
        assert "cut this watch off: outbox over 64 MiB" in result.stderr
        assert len(result.stdout.splitlines()) == 6  # the replay came first
        assert "last cursor 6" in result.stderr
