"""One owner process per conversation (issue #8, defect 5), through the real ``acp-bridge``.

Before the fix a second ``run --conversation ID`` (or ``--resume``) on a conversation that a
live process was running recovered its running message as failed and prompted its queue a
second time. Now the second process exits 2 with one line naming the conversation and the
owner's pid, and prompts nothing; the lock is the kernel's (``flock``), so it goes away with
the owner, even after ``kill -9``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
ECHO = [sys.executable, "-u", str(AGENTS / "echo_agent.py")]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=timeout,
    )


def next_event(stdout: IO[str], name: str) -> dict[str, Any]:
    """Read A's --json stdout up to the first event called ``name`` (a blocking read on the
    pipe: the event is waited for, not slept for)."""
    for line in stdout:
        event = json.loads(line)
        if event["event"] == name:
            return event
    raise AssertionError(f"A's stdout ended before a {name!r} event")


@contextmanager
def owner_a(store: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Process A on a new conversation, fed by a pipe: its first message has ended ``done``
    and A, its stdin still open, owns the conversation. Yields A and the conversation id."""
    a = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--json", "--store", str(store), "--", *ECHO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    assert a.stdin is not None and a.stdout is not None
    try:
        session = next_event(a.stdout, "session")
        a.stdin.write("echo a\n")
        a.stdin.flush()
        ended = next_event(a.stdout, "turn_ended")
        assert ended["state"] == "done", ended
        yield a, session["conversation"]
    finally:
        if a.poll() is None:
            a.kill()
        a.wait(timeout=30)
        for pipe in (a.stdin, a.stdout, a.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


def test_a_second_process_on_an_owned_conversation_exits_2_and_prompts_nothing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.db"
    with owner_a(store) as (a, conversation):
        b = run("--store", str(store), "--conversation", conversation, "-m", "echo b", "--", *ECHO)
        assert b.returncode == 2, b.stderr
        assert b.stdout == ""
        lines = b.stderr.strip().splitlines()
        assert len(lines) == 1, b.stderr
        assert conversation in lines[0] and f"process {a.pid}" in lines[0], lines[0]
        resumed = run("--store", str(store), "--resume", "-m", "echo b", "--", *ECHO)
        assert resumed.returncode == 2, resumed.stderr
        assert conversation in resumed.stderr
        # A goes on, alone: its next message runs, and it ends normally at stdin EOF.
        assert a.stdin is not None and a.stdout is not None
        a.stdin.write("echo a2\n")
        a.stdin.close()
        rest = [json.loads(line) for line in a.stdout]
        assert a.wait(timeout=30) == 0
        texts = [e["text"] for e in rest if e["event"] == "turn_started"]
        assert texts == ["echo a2"]
    # A has exited: B may continue the conversation now, and only B's message is prompted.
    after = run(
        "--store", str(store), "--conversation", conversation, "--json", "-m", "echo b", "--", *ECHO
    )
    assert after.returncode == 0, after.stderr
    started = [json.loads(x) for x in after.stdout.splitlines() if '"turn_started"' in x]
    assert [e["text"] for e in started] == ["echo b"]
    lock = tmp_path / "s.db.locks" / f"{conversation}.lock"
    assert lock.stat().st_mode & 0o777 == 0o600
    assert lock.parent.stat().st_mode & 0o777 == 0o700


def test_an_owner_killed_with_sigkill_does_not_keep_the_conversation(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with owner_a(store) as (a, conversation):
        os.kill(a.pid, signal.SIGKILL)
        assert a.wait(timeout=30) == -signal.SIGKILL
        b = run("--store", str(store), "--conversation", conversation, "-m", "echo b", "--", *ECHO)
    assert b.returncode == 0, b.stderr
    assert b.stdout.splitlines() == ["b"]
