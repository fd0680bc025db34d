"""Steering through the command line (issue 24), real processes: ``run`` reads ``steer: `` lines
as steers; a ``kill -9`` of the bridge between a steer's commit and the agent's answer leaves a
message that a resume never sends again; ``chat`` steers with ``/steer TEXT`` under a pty while a
plain line typed during the turn still queues."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tests.e2e.test_chat import chat, messages
from tests.steer.helpers import STEERING, argv, deliveries, environment, logged

ROOT = Path(__file__).resolve().parents[2]


def _env(log: Path, hold: Path | None = None) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **environment(log, hold)}


@contextlib.contextmanager
def _run(tmp_path: Path, env: dict[str, str], *args: str) -> Iterator[subprocess.Popen[str]]:
    command = [sys.executable, "-m", "acp_bridge", "run", "--json", "--cwd", str(tmp_path)]
    process = subprocess.Popen(
        [*command, "--store", str(tmp_path / "s.db"), *args, "--", *argv(STEERING, tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _until(stdout: IO[str] | None, kind: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    """Read ``--json`` events until one of ``kind`` (the read blocks on the bridge's output)."""
    assert stdout is not None
    for line in stdout:
        event = json.loads(line)
        seen.append(event)
        if event["event"] == kind:
            return event
    raise AssertionError(f"the run ended before {kind!r}: {seen}")


def _wait_logged(log: Path, line: str, timeout_s: float = 20) -> None:
    """Wait until the agent logged ``line`` (it appends to the file as it receives)."""
    deadline = time.monotonic() + timeout_s
    while line not in logged(log):
        assert time.monotonic() < deadline, f"the agent never logged {line!r}: {logged(log)}"
        time.sleep(0.02)


def test_run_reads_steer_lines_as_steers(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    seen: list[dict[str, Any]] = []
    with _run(tmp_path, _env(log)) as process:
        assert process.stdin is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        _until(process.stdout, "update", seen)  # the turn runs at the agent
        process.stdin.write("steer: use the other config file\n")
        process.stdin.close()
        steered = _until(process.stdout, "steered", seen)
        assert process.stdout is not None
        seen += [json.loads(line) for line in process.stdout]
        assert process.wait(timeout=30) == 0
    assert (steered["seq"], steered["into"]) == (2, 1)
    texts = [e["update"]["content"]["text"] for e in seen if e["event"] == "update"]
    assert "[steer] use the other config file " in texts
    assert [e["seq"] for e in seen if e["event"] == "turn_started"] == [1]
    assert deliveries(log, "use the other config file") == 1
    conversation = next(e["conversation"] for e in seen if e["event"] == "session")
    shown = _bridge(log, "show", "--store", str(tmp_path / "s.db"), conversation)
    assert "#2 steered" in shown and "[steered into #1 (injected)]" in shown
    document = json.loads(
        _bridge(log, "show", "--json", "--store", str(tmp_path / "s.db"), conversation)
    )
    assert document["messages"][1]["state"] == "steered"
    (event,) = document["messages"][1]["steering"]
    assert (event["event"], event["into"], event["outcome"]) == ("steered", 1, "injected")


def _bridge(log: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(log),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_steer_cut_by_kill_9_of_the_bridge_is_never_sent_twice(tmp_path: Path) -> None:
    log, hold = tmp_path / "agent.log", tmp_path / "answer-steers"
    seen: list[dict[str, Any]] = []
    with _run(tmp_path, _env(log, hold)) as process:
        assert process.stdin is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        _until(process.stdout, "update", seen)
        process.stdin.write("steer: careful now\n")
        process.stdin.flush()
        _wait_logged(log, "steer careful now")  # committed, sent; the answer is held
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        states = dict(db.execute("SELECT seq, state FROM messages"))
    assert states == {1: "running", 2: "steering"}
    hold.touch()
    with _run(tmp_path, _env(log, hold), "--resume", "-m", "echo after") as process:
        assert process.stdin is not None
        process.stdin.close()
        assert process.stdout is not None
        resumed = [json.loads(line) for line in process.stdout]
        # 4: the messages the crash cut (the turn, the steer) did not end done.
        assert process.wait(timeout=60) == 4, process.stderr.read() if process.stderr else ""
    failed = {e["seq"]: e for e in resumed if e["event"] == "turn_failed"}
    assert failed[2]["error"]["message"] == "steer unconfirmed" and failed[2]["recoverable"]
    assert [e["seq"] for e in resumed if e["event"] == "turn_started"] == [3]
    assert [line for line in logged(log) if "careful now" in line] == ["steer careful now"]
    assert messages(tmp_path / "s.db") == [(1, "failed", 1), (2, "failed", 0), (3, "done", 1)]


def test_chat_steers_with_slash_steer_and_queues_a_plain_line(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    wrapped = ["env", *(f"{k}={v}" for k, v in environment(log).items())]
    with chat(["--", *wrapped, *argv(STEERING, tmp_path)], tmp_path) as terminal:
        terminal.say("echo begun; steers 1")
        terminal.read_until(b"begun\r\n")  # the answer (the typed line says "begun;")
        terminal.say("echo later")
        terminal.read_until(b"queued as message 2")
        terminal.say("/steer go left")
        # Message 2 starts once the steer settled. The agent's echo of the steer, the note that
        # it joined and the turn's end race: any may come first.
        shown = terminal.read_until(b"later\r\n")  # message 2's answer, after the turn
        assert b"[steer] go left" in shown and b"message 3 joined the turn of message 1" in shown
        terminal.read_until(b"[done] end_turn")
        terminal.say("/quit")
        assert terminal.finish() == 0
    assert messages(tmp_path / "s.db") == [(1, "done", 1), (2, "done", 1), (3, "steered", 0)]
    assert deliveries(log, "go left") == 1


def test_chat_steers_a_line_sent_with_alt_enter(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    wrapped = ["env", *(f"{k}={v}" for k, v in environment(log).items())]
    with chat(["--", *wrapped, *argv(STEERING, tmp_path)], tmp_path) as terminal:
        terminal.say("echo begun; steers 1")
        terminal.read_until(b"begun\r\n")
        terminal.read_until(b"> ")
        terminal.type(b"go up\x1b\r")  # Alt-Enter: ESC then Enter
        terminal.read_until(b"> /steer go up")  # the line, as sent
        terminal.read_until(b"[steer] go up")
        terminal.read_until(b"[done] end_turn")  # the turn took its steer and ended: a /quit
        # sent before that cancels it (message 1 then ends cancelled, as once under load)
        terminal.say("/help")
        terminal.read_until(b"Alt-Enter sends the line as a steer")
        terminal.say("/quit")
        assert terminal.finish() == 0
        terminal.drain()
        # The note that it joined races the agent's echo and the turn's end: any order.
        assert b"message 2 joined the turn of message 1" in terminal.seen
    assert messages(tmp_path / "s.db") == [(1, "done", 1), (2, "steered", 0)]
    assert deliveries(log, "go up") == 1
