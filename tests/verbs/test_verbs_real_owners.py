"""The verbs end to end against real owners (issue 22): the real ``acp-bridge serve`` running
the echo agent, and a ``run`` that owns a conversation and serves its own endpoint."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

from tests.verbs.fake_hosts import ECHO, ENV, ROOT, make_store, short_dir, verb


def next_event(stdout: IO[str], name: str, **match: Any) -> dict[str, Any]:
    """Read NDJSON events up to the first called ``name`` (with ``match``'s fields)."""
    for line in stdout:
        event = json.loads(line)
        if event["event"] == name and all(event.get(k) == v for k, v in match.items()):
            return dict(event)
    raise AssertionError(f"the output ended before a {name!r} event")


@contextmanager
def process(*argv: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env or ENV,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=30)
        for pipe in (child.stdin, child.stdout, child.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


@contextmanager
def serving(directory: Path, store: Path) -> Iterator[Path]:
    socket = directory / "run" / "host.sock"
    with process("serve", "--socket", str(socket), "--store", str(store), "--", *ECHO) as host:
        assert host.stderr is not None
        first = host.stderr.readline()
        assert "serving" in first, first
        yield socket


def test_send_watch_status_and_cancel_through_the_real_host() -> None:
    with short_dir() as d:
        store = make_store(d)
        with serving(d, store) as socket:
            where = ("--store", str(store), "--socket", str(socket))
            with process("watch", "c-fake", "--json", *where) as watch:
                sent = verb("send", "c-fake", "-m", "echo from the shell", *where)
                assert sent.returncode == 0, sent.stderr
                assert sent.stdout.split() == ["1"]
                assert watch.stdout is not None
                started = next_event(watch.stdout, "turn_started", seq=1)
                assert started["text"] == "echo from the shell"
                ended = next_event(watch.stdout, "turn_ended", seq=1)
                assert ended["state"] == "done" and isinstance(ended["cursor"], int)
                watch.send_signal(signal.SIGINT)
                assert watch.wait(timeout=30) == 130
            status = verb("status", "--json", *where)
            assert status.returncode == 0, status.stderr
            row = json.loads(status.stdout)
            assert row["conversationId"] == "c-fake" and row["queueDepth"] == 0
            assert row["owner"]["socket"] == str(socket)
            cancel = verb("cancel", "c-fake", *where)
            assert cancel.returncode == 0, cancel.stderr
            assert "nothing was running in conversation c-fake" in cancel.stderr


def test_a_run_that_owns_the_conversation_takes_a_message_sent_from_another_shell() -> None:
    with short_dir() as d:
        store = d / "s.db"
        env = {**ENV, "XDG_RUNTIME_DIR": str(d)}
        with ExitStack() as stack:
            run = stack.enter_context(
                process("run", "--json", "--store", str(store), "--", *ECHO, env=env)
            )
            assert run.stdin is not None and run.stdout is not None
            conversation = next_event(run.stdout, "session")["conversation"]
            run.stdin.write("echo first\n")
            run.stdin.flush()
            next_event(run.stdout, "turn_ended", seq=1)
            # Another shell, with no host anywhere: the lock names the run's own socket.
            where = ("--store", str(store), "--socket", str(d / "no-host.sock"))
            watch = stack.enter_context(process("watch", conversation, "--json", *where))
            assert watch.stdout is not None
            next_event(watch.stdout, "turn_ended", seq=1)  # the replay: the watch is live now
            sent = verb("send", conversation, "-m", "echo from the shell", *where)
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.split() == ["2"]
            started = next_event(run.stdout, "turn_started", seq=2)
            assert started["text"] == "echo from the shell"
            next_event(run.stdout, "turn_ended", seq=2)
            status = verb("status", conversation, "--json", *where)
            assert status.returncode == 0, status.stderr
            assert json.loads(status.stdout)["owner"]["pid"] == run.pid
            assert next_event(watch.stdout, "turn_ended", seq=2)["state"] == "done"
            run.stdin.close()
            assert run.wait(timeout=30) == 0
            # The run ended, and with it the watch: nothing follows the conversation now.
            assert watch.wait(timeout=30) == 0
            assert watch.stderr is not None
            assert "went away; nothing follows" in watch.stderr.read()
