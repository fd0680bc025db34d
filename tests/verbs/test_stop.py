"""``acp-bridge stop ID`` (issue 23) on a SQLite store: through the real host, through a ``run``
that owns the conversation, and with no owner at all (the conversation paused in the store)."""

from __future__ import annotations

import json
from contextlib import ExitStack

from acp_bridge.conversation.store import QueueStore
from tests.verbs.fake_hosts import ECHO, ENV, make_store, short_dir, verb
from tests.verbs.test_verbs_real_owners import next_event, process, serving


def test_stop_through_the_real_host_cancels_the_turn_and_keeps_the_rest_queued() -> None:
    with short_dir() as d:
        store = make_store(d)
        with serving(d, store) as socket:
            where = ("--store", str(store), "--socket", str(socket))
            with process("watch", "c-fake", "--json", *where) as watch:
                assert watch.stdout is not None
                sent = verb("send", "c-fake", "-m", "wait 60", "-m", "echo later", *where)
                assert sent.returncode == 0, sent.stderr
                next_event(watch.stdout, "turn_started", seq=1)
                running = json.loads(verb("status", "c-fake", "--json", *where).stdout)
                assert running["runningSeq"] == 1 and running["queueDepth"] == 1  # not counted
                assert running["paused"] is False
                stop = verb("stop", "c-fake", *where)
                assert stop.returncode == 0, stop.stderr
                assert stop.stdout == "1\n"
                assert (
                    "stopped conversation c-fake: message 1 cancelled; 1 queued message "
                    "stays queued, paused until a send or a resume"
                ) in stop.stderr
                ended = next_event(watch.stdout, "turn_ended", seq=1)
                assert ended["state"] == "cancelled"
                status = verb("status", "c-fake", "--json", *where)
                row = json.loads(status.stdout)
                assert row["runningSeq"] is None and row["queueDepth"] == 1 and row["paused"]
                table = verb("status", "c-fake", *where).stdout.splitlines()[1].split()
                assert table[3:5] == ["1", "paused"], table
                again = verb("stop", "c-fake", *where)  # nothing runs now: said so
                assert again.returncode == 0 and again.stdout == ""
                assert "nothing was running; 1 queued message stays queued" in again.stderr
                resumed = verb("send", "c-fake", "-m", "echo resumed", *where)  # a send resumes
                assert resumed.stdout.split() == ["3"]
                assert next_event(watch.stdout, "turn_ended", seq=2)["state"] == "done"
                assert next_event(watch.stdout, "turn_ended", seq=3)["state"] == "done"


def test_stop_through_a_run_that_owns_the_conversation_pauses_its_queue() -> None:
    with short_dir() as d:
        store = d / "s.db"
        env = {**ENV, "XDG_RUNTIME_DIR": str(d)}
        with ExitStack() as stack:
            run = stack.enter_context(
                process("run", "--json", "--store", str(store), "--", *ECHO, env=env)
            )
            assert run.stdin is not None and run.stdout is not None
            conversation = next_event(run.stdout, "session")["conversation"]
            run.stdin.write("wait 60\necho queued\n")
            run.stdin.flush()
            next_event(run.stdout, "turn_started", seq=1)
            where = ("--store", str(store), "--socket", str(d / "no-host.sock"))
            stop = verb("stop", conversation, *where)
            assert stop.returncode == 0, stop.stderr
            assert stop.stdout == "1\n"
            assert "message 1 cancelled; 1 queued message stays queued" in stop.stderr
            assert next_event(run.stdout, "turn_ended", seq=1)["state"] == "cancelled"
            run.stdin.close()
            assert run.wait(timeout=30) == 4  # message 2 was left queued
        with QueueStore.open(store, read_only=True) as opened:
            record = opened.get_conversation(conversation)
            assert record is not None and record.paused
            assert [m.state.value for m in opened.messages(conversation)] == [
                "cancelled",
                "queued",
            ]


def test_stop_with_no_owner_pauses_the_conversation_in_the_store() -> None:
    with short_dir() as d:
        store = make_store(d)
        with QueueStore.open(store) as opened:
            opened.add_message("c-fake", [{"type": "text", "text": "echo a"}], now=2.0)
        where = ("--store", str(store), "--socket", str(d / "no-host.sock"))
        stop = verb("stop", "c-fake", *where)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout == ""
        assert (
            "no live owner: stopped conversation c-fake: nothing was running; 1 queued message "
            "stays queued, paused until a send or a resume"
        ) in stop.stderr
        with QueueStore.open(store, read_only=True) as opened:
            record = opened.get_conversation("c-fake")
            assert record is not None and record.paused
        unknown = verb("stop", "nope", *where)
        assert unknown.returncode == 2 and "no stored conversation 'nope'" in unknown.stderr
