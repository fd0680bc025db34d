"""Steering through the real commands (issue 24): ``acp-bridge send --steer`` against a
``serve`` and against a ``run`` that owns the conversation; ``kill -9`` of the host between a
steer's commit and the agent's answer, and the next host never sends it twice."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.host.cli_client import LineClient, finish, start_serve
from tests.steer.helpers import STEERING, argv, deliveries, environment, logged
from tests.verbs.fake_hosts import ENV, short_dir, verb
from tests.verbs.test_verbs_real_owners import next_event, process


def _agent(directory: Path, log: Path, hold: Path | None = None) -> list[str]:
    assignments = [f"{k}={v}" for k, v in environment(log, hold).items()]
    return ["env", *assignments, *argv(STEERING, directory)]


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _chunk(text: str) -> Any:
    def match(message: dict[str, Any]) -> bool:
        if message.get("method") != "session/update":
            return False
        update = message["params"]["update"]
        return bool(update.get("content", {}).get("text") == text)

    return match


def _wait_logged(log: Path, line: str, timeout_s: float = 20) -> None:
    """Wait until the agent logged ``line`` (it appends to the file as it receives)."""
    deadline = time.monotonic() + timeout_s
    while line not in logged(log):
        assert time.monotonic() < deadline, f"the agent never logged {line!r}: {logged(log)}"
        time.sleep(0.02)


@contextlib.contextmanager
def _serving(directory: Path, log: Path, hold: Path | None = None) -> Iterator[tuple[Any, ...]]:
    socket, store = directory / "run" / "host.sock", directory / "s.db"
    host = start_serve(
        "--store", str(store), "--socket", str(socket), "--", *_agent(directory, log, hold)
    )
    try:
        yield host, socket, store
    finally:
        finish(host, signal.SIGTERM)


def _open_turn(socket: Path, directory: Path, text: str) -> tuple[LineClient, str]:
    """A client that created a conversation and sent it ``text``, once its first chunk came."""
    client = LineClient(socket)
    client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    new = client.request("session/new", {"cwd": str(directory), "mcpServers": []})
    sid: str = new["result"]["sessionId"]
    sent = client.request("_acp_bridge/send", {"conversationId": sid, "content": _text(text)})
    assert sent["result"] == {"seq": 1}
    client.read_until(_chunk("go"))  # the agent is running the turn
    return client, sid


def test_send_steer_through_serve_says_it_joined_the_turn() -> None:
    with short_dir() as d:
        log = d / "agent.log"
        with _serving(d, log) as (_host, socket, store):
            client, sid = _open_turn(socket, d, "echo go; steers 1")
            where = ("--store", str(store), "--socket", str(socket))
            sent = verb("send", sid, "--steer", "-m", "go left", *where)
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.split() == ["2"]
            assert "message 2 steered into the turn of message 1 (injected)" in sent.stderr
            client.read_until(_chunk("[steer] go left "))
            client.close()
        assert deliveries(log, "go left") == 1


def test_send_steer_through_a_run_owner_says_it_joined_the_turn() -> None:
    with short_dir() as d:
        log, store = d / "agent.log", d / "s.db"
        env = {**ENV, "XDG_RUNTIME_DIR": str(d)}
        command = ("run", "--json", "--store", str(store), "--", *_agent(d, log))
        with process(*command, env=env) as run:
            assert run.stdin is not None and run.stdout is not None
            conversation = next_event(run.stdout, "session")["conversation"]
            run.stdin.write("echo go; steers 1\n")
            run.stdin.flush()
            next_event(run.stdout, "update")  # the turn runs at the agent
            where = ("--store", str(store), "--socket", str(d / "no-host.sock"))
            sent = verb("send", conversation, "--steer", "-m", "go right", *where)
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.split() == ["2"]
            assert "message 2 steered into the turn of message 1 (injected)" in sent.stderr
            steered = next_event(run.stdout, "steered")
            assert (steered["seq"], steered["into"]) == (2, 1)
            run.stdin.close()
            assert run.wait(timeout=30) == 0
        assert deliveries(log, "go right") == 1


def test_kill_9_of_the_host_between_commit_and_answer_never_sends_the_steer_twice() -> None:
    with short_dir() as d:
        log, hold = d / "agent.log", d / "answer-steers"
        with _serving(d, log, hold) as (host, socket, store):
            client, sid = _open_turn(socket, d, "echo go; steers 1")
            status = client.request("_acp_bridge/status", {"conversationId": sid})["result"]
            agent_pid = status["conversations"][0]["pid"]
            client.send(
                {
                    "jsonrpc": "2.0",
                    "id": 99,
                    "method": "_session/steering",
                    "params": {"sessionId": sid, "prompt": _text("careful now")},
                }
            )
            _wait_logged(log, "steer careful now")  # committed, sent; the answer is held
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=30)
            client.close()
        if agent_pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent_pid, signal.SIGKILL)  # the orphaned agent, if it outlived us
        with contextlib.closing(sqlite3.connect(store)) as db:
            states = dict(db.execute("SELECT seq, state FROM messages"))
        assert states == {1: "running", 2: "steering"}
        hold.touch()
        with _serving(d, log, hold) as (_host, socket, _store):
            client = LineClient(socket)
            client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            client.request("session/resume", {"sessionId": sid, "cwd": str(d)})
            last = {"sessionId": sid, "prompt": _text("echo after")}
            assert client.request("session/prompt", last)["result"] == {"stopReason": "end_turn"}
            client.close()
        with contextlib.closing(sqlite3.connect(store)) as db:
            rows = list(db.execute("SELECT seq, state, error FROM messages ORDER BY seq"))
        assert [(seq, state) for seq, state, _ in rows] == [
            (1, "failed"),
            (2, "failed"),
            (3, "done"),
        ]
        assert "steer unconfirmed" in str(rows[1][2])
        assert [line for line in logged(log) if "careful now" in line] == ["steer careful now"]


def test_a_new_host_settles_a_steer_left_unanswered_with_no_client_asking() -> None:
    """The turn had ended and only the steer was left open when the host died: the next host
    opens that conversation by itself and ends the steer "steer unconfirmed", never resent."""
    with short_dir() as d:
        log, hold = d / "agent.log", d / "answer-steers"
        with _serving(d, log, hold) as (host, socket, store):
            client, sid = _open_turn(socket, d, "echo go; steers 1")
            status = client.request("_acp_bridge/status", {"conversationId": sid})["result"]
            agent_pid = status["conversations"][0]["pid"]
            client.send(
                {
                    "jsonrpc": "2.0",
                    "id": 99,
                    "method": "_session/steering",
                    "params": {"sessionId": sid, "prompt": _text("careful now")},
                }
            )
            _wait_logged(log, "steer careful now")
            host.send_signal(signal.SIGKILL)
            host.wait(timeout=30)
            client.close()
        if agent_pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent_pid, signal.SIGKILL)
        with contextlib.closing(sqlite3.connect(store)) as db:
            # The state a host leaves when the turn ended before the kill: only the steer open.
            db.execute("UPDATE messages SET state = 'done' WHERE seq = 1")
            db.commit()
        hold.touch()
        with _serving(d, log, hold):
            deadline = time.monotonic() + 60
            while True:
                with contextlib.closing(sqlite3.connect(store)) as db:
                    row = db.execute("SELECT state, error FROM messages WHERE seq = 2").fetchone()
                if row[0] != "steering":
                    break
                assert time.monotonic() < deadline, "the new host never settled the steer"
                time.sleep(0.05)
        assert row[0] == "failed" and "steer unconfirmed" in str(row[1])
        assert [line for line in logged(log) if "careful now" in line] == ["steer careful now"]
