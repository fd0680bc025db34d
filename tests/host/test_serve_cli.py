"""``acp-bridge serve``, the real command: refusals, kill -9 and resume, exit when idle."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.host.cli_client import ENV, ROOT, LineClient, agent, finish, start_serve

OTHER_UID = 65534


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def _event(kind: str) -> Any:
    return lambda m: (
        m.get("method") == "_acp_bridge/event" and m["params"]["event"]["event"] == kind
    )


def test_help_is_complete() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "serve", "--help"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 0
    for option in (
        "--socket",
        "--store",
        "--agent-idle",
        "--exit-when-idle",
        "--permission",
        "--client-outbox-bytes",
        "--max-clients",
    ):
        assert option in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's directory needs root")
def test_a_socket_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    os.chown(directory, OTHER_UID, OTHER_UID)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "acp_bridge",
            "serve",
            "--store",
            str(tmp_path / "q.db"),
            "--socket",
            str(directory / "host.sock"),
            "--",
            *agent("echo_agent.py"),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(directory) in lines[0] and f"uid {OTHER_UID}" in lines[0]
    assert "Traceback" not in done.stderr


def test_a_group_writable_socket_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "sock"
    directory.mkdir()
    directory.chmod(0o770)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "acp_bridge",
            "serve",
            "--store",
            str(tmp_path / "q.db"),
            "--socket",
            str(directory / "host.sock"),
            "--",
            *agent("echo_agent.py"),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 2
    assert "write" in done.stderr and "Traceback" not in done.stderr


def test_a_second_host_on_the_socket_is_refused_and_idle_exit(tmp_path: Path) -> None:
    socket_path = tmp_path / "s" / "host.sock"
    store = tmp_path / "q.db"
    host = start_serve(
        "--store",
        str(store),
        "--socket",
        str(socket_path),
        "--exit-when-idle",
        "0.5",
        "--",
        *agent("echo_agent.py"),
    )
    try:
        client = LineClient(socket_path)  # a client: the host is not idle meanwhile
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "acp_bridge",
                "serve",
                "--store",
                str(store),
                "--socket",
                str(socket_path),
            ],
            capture_output=True,
            text=True,
            env=ENV,
            cwd=ROOT,
            timeout=30,
        )
        assert second.returncode == 2 and "already listening" in second.stderr
        hello = client.request("_acp_bridge/hello")["result"]["host"]
        assert hello["store"] == str(store) and hello["pid"] == host.pid
        client.close()
        assert host.wait(timeout=30) == 0  # no client, nothing to do: exits by itself
    finally:
        stderr = finish(host, signal.SIGKILL)
    assert "Traceback" not in stderr and "exiting" in stderr


def test_kill_9_of_the_host_mid_turn_loses_nothing_and_prompts_nothing_twice(
    tmp_path: Path,
) -> None:
    socket_path = tmp_path / "s" / "host.sock"
    store = tmp_path / "q.db"
    history = tmp_path / "history.json"
    argv = agent("echo_agent.py", "--history", str(history))
    serve = ("--store", str(store), "--socket", str(socket_path), "--", *argv)
    first = start_serve(*serve)
    try:
        client = LineClient(socket_path)
        client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
            "sessionId"
        ]
        watched = client.request("_acp_bridge/watch", {"conversationId": sid})
        assert "result" in watched
        client.request(
            "_acp_bridge/send", {"conversationId": sid, "content": _text("echo before; wait 60")}
        )
        client.request("_acp_bridge/send", {"conversationId": sid, "content": _text("echo after")})
        client.read_until(_event("update"))  # the agent is answering the first message
        status = client.request("_acp_bridge/status", {"conversationId": sid})["result"]
        agent_pid = status["conversations"][0]["pid"]
        row = status["conversations"][0]
        assert row["runningSeq"] == 1 and row["queueDepth"] == 1  # one running, one waiting
        client.close()
    finally:
        finish(first, signal.SIGKILL)
    if agent_pid:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent_pid, signal.SIGKILL)  # the orphaned agent, if it outlived us
    second = start_serve(*serve)
    try:
        client = LineClient(socket_path)
        client.request("_acp_bridge/watch", {"conversationId": sid})
        ended = client.read_until(
            lambda m: (
                m.get("method") == "_acp_bridge/event"
                and m["params"]["event"]["event"] == "turn_ended"
                and m["params"]["event"]["seq"] == 2
            )
        )
        assert ended["params"]["event"]["stopReason"] == "end_turn"
        events = [
            m["params"]["event"]
            for m in client.notifications
            if m.get("method") == "_acp_bridge/event"
        ]
        failed = [e for e in events if e["event"] == "turn_failed"]
        assert [e["seq"] for e in failed] == [1] and failed[0]["recoverable"] is True
        cursors = [
            m["params"]["cursor"]
            for m in client.notifications
            if m.get("method") == "_acp_bridge/event"
        ]
        assert cursors == sorted(set(cursors))
        client.close()
    finally:
        stderr = finish(second, signal.SIGTERM)
    assert second.returncode == 0
    saved = json.loads(history.read_text())
    prompts = [
        m["text"] for s in saved["sessions"].values() for m in s["messages"] if m["role"] == "user"
    ]
    assert sorted(prompts) == [
        "echo after",
        "echo before; wait 60",
    ]  # each prompted once, none again
    assert "Traceback" not in stderr


def _running_turn(tmp_path: Path, prompt: str, *agent_flags: str) -> tuple[Any, Any, str]:
    """A host with one conversation whose turn (``prompt``) is running: (process, client,
    session id)."""
    socket_path = tmp_path / "s" / "host.sock"
    argv = agent("echo_agent.py", *agent_flags)
    serve = start_serve("--store", str(tmp_path / "q.db"), "--socket", str(socket_path), "--",
                        *argv)  # fmt: skip
    client = LineClient(socket_path)
    client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    sid = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
        "sessionId"
    ]
    client.request("_acp_bridge/watch", {"conversationId": sid})
    client.request("_acp_bridge/send", {"conversationId": sid, "content": _text(prompt)})
    client.read_until(_event("update"))  # the agent is answering
    return serve, client, sid


def _stored_end(store: Path, sid: str) -> dict[str, Any]:
    from acp_bridge.conversation.store import QueueStore

    with QueueStore.open(store, read_only=True) as opened:
        ends = [e.data for e in opened.events(sid) if e.kind in ("turn_ended", "turn_failed")]
    assert len(ends) == 1, ends
    return dict(ends[0])


def test_a_signal_cancels_the_running_turn_through_the_agent_then_exits(tmp_path: Path) -> None:
    """SIGTERM mid-turn: the agent is sent session/cancel while it can still be told, answers
    it, and the host exits 0 at once (it used to stop the agent's connection first, log "could
    not send session/cancel", wait out the grace window and record the turn cut: 14 s)."""
    serve, client, sid = _running_turn(tmp_path, "echo hi; wait 120")
    try:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=4)  # well within the 5 s grace window it used to wait out
    finally:
        client.close()
        stderr = finish(serve)
    assert serve.returncode == 0, stderr
    assert "could not send session/cancel" not in stderr
    assert "did not close in time" not in stderr
    assert "a second signal stops at once" in stderr
    end = _stored_end(tmp_path / "q.db", sid)
    assert end["state"] == "cancelled" and end["stopReason"] == "cancelled", end


def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    """A turn whose agent ignores its cancel waits out the grace window on the first signal; a
    second signal does not wait for it."""
    serve, client, sid = _running_turn(tmp_path, "echo hi; stubborn 120")
    status = client.request("_acp_bridge/status", {"conversationId": sid})["result"]
    agent_pid = status["conversations"][0]["pid"]
    try:
        serve.send_signal(signal.SIGTERM)
        assert serve.stderr is not None
        assert "SIGTERM: stopping" in serve.stderr.readline()
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=4)  # before the 5 s grace window ends
    finally:
        client.close()
        stderr = finish(serve)
    assert "SIGINT: stopping at once" in stderr
    assert "Traceback" not in stderr
    assert serve.returncode == 0, stderr
    end = _stored_end(tmp_path / "q.db", sid)
    assert end["state"] == "cancelled", end  # recorded, not left running
    with contextlib.suppress(ProcessLookupError):
        os.kill(agent_pid, 0)
        raise AssertionError(f"the agent {agent_pid} outlived the host")
