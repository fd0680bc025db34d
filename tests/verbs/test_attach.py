"""``acp-bridge attach``: an editor's agent command relayed to the host (issue 22).

The editor here is the test, on attach's stdin and stdout: it writes ACP lines and reads the
answers, as an editor would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from acp_bridge.host.client import with_agent_choice
from tests.verbs.fake_hosts import ECHO, ENV, ROOT, fake_host, make_store, short_dir


@contextmanager
def attach(*args: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "attach", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


def call(process: subprocess.Popen[str], message: dict[str, Any]) -> list[dict[str, Any]]:
    """Write ``message``; read lines up to its answer (notifications before it included)."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(message) + "\n")
    process.stdin.flush()
    seen = []
    for line in process.stdout:
        seen.append(json.loads(line))
        if seen[-1].get("id") == message["id"]:
            return seen
    raise AssertionError(f"attach's stdout ended before the answer to {message['method']}")


def request(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def test_attach_relays_a_round_trip_and_names_the_agent_on_session_new() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=store) as host, attach(
            "--socket", str(host.socket), "--store", str(store), "--agent", "echo"
        ) as editor:  # fmt: skip
            init = call(editor, request(1, "initialize", {"protocolVersion": 1}))
            assert init[-1]["result"]["agentInfo"]["name"] == "fake-host"
            new = call(editor, request(2, "session/new", {"cwd": "/", "mcpServers": []}))
            assert new[-1]["result"] == {"sessionId": "c-fake"}
            prompt = {"sessionId": "c-fake", "prompt": [{"type": "text", "text": "hi there"}]}
            turn = call(editor, request(3, "session/prompt", prompt))
            assert turn[0]["method"] == "session/update"
            assert turn[0]["params"]["update"]["content"]["text"] == "hi there"
            assert turn[-1]["result"] == {"stopReason": "end_turn"}
            assert editor.stdin is not None
            editor.stdin.close()  # the editor goes away: attach detaches
            assert editor.wait(timeout=30) == 0
            received = host.received()
        news = [m for m in received if m.get("method") == "session/new"]
        assert news[0]["params"]["_meta"] == {"acpBridge": {"agent": "echo"}}
        prompts = [m for m in received if m.get("method") == "session/prompt"]
        assert prompts == [request(3, "session/prompt", prompt)]  # unchanged


def test_attach_exits_3_with_one_line_when_the_host_goes_away() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=store) as host, attach(
            "--socket", str(host.socket), "--store", str(store)
        ) as editor:  # fmt: skip
            call(editor, request(1, "initialize", {"protocolVersion": 1}))
            host.process.kill()
            host.process.wait(timeout=30)
            assert editor.wait(timeout=30) == 3
            assert editor.stderr is not None
            err = editor.stderr.read()
        assert "closed the connection; the conversation goes on there" in err
        assert "Traceback" not in err


def test_attach_refuses_a_host_of_another_store_before_relaying_anything() -> None:
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=Path("/elsewhere/s.db")) as host, attach(
            "--socket", str(host.socket), "--store", str(store)
        ) as editor:  # fmt: skip
            assert editor.wait(timeout=30) == 2
            assert editor.stderr is not None
            assert "serves the store /elsewhere/s.db" in editor.stderr.read()


def test_attach_starts_a_host_and_a_second_attach_loads_the_same_conversation() -> None:
    """The real ``acp-bridge serve``, started by the first attach; the second attach (the
    editor restarted) finds it running and its session/load replays the first one's turn."""
    with short_dir() as d:
        store = make_store(d)
        socket = d / "run" / "host.sock"
        options = ("--socket", str(socket), "--store", str(store), "--exit-when-idle", "60")
        host_pid = None
        try:
            with attach(*options, "--", *ECHO) as editor:
                init = call(editor, request(1, "initialize", {"protocolVersion": 1}))
                assert init[-1]["result"]["agentCapabilities"]["loadSession"] is True
                new = call(editor, request(2, "session/new", {"cwd": str(ROOT), "mcpServers": []}))
                session = new[-1]["result"]["sessionId"]
                prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "echo hi"}]}
                turn = call(editor, request(3, "session/prompt", prompt))
                assert turn[-1]["result"]["stopReason"] == "end_turn"
                # The host is not attach's descendant: a client that stops its agent's whole
                # tree (acpx does) stops attach, never the host.
                tree = psutil.Process(editor.pid).children(recursive=True)
                assert not [p for p in tree if "serve" in p.cmdline()], tree
                assert editor.stdin is not None and editor.stderr is not None
                editor.stdin.close()
                assert editor.wait(timeout=30) == 0
                err = editor.stderr.read()
            assert f"starting a host on {socket}" in err
            host_pid = int(err.split("(pid ", 1)[1].split(",", 1)[0])
            assert (socket.parent / "host.log").stat().st_mode & 0o777 == 0o600
            assert socket.parent.stat().st_mode & 0o777 == 0o700
            with attach(*options) as again:
                call(again, request(1, "initialize", {"protocolVersion": 1}))
                load = {"sessionId": session, "cwd": str(ROOT), "mcpServers": []}
                loaded = call(again, request(2, "session/load", load))
                assert "result" in loaded[-1], loaded[-1]
                texts = [
                    m["params"]["update"].get("content", {}).get("text", "")
                    for m in loaded
                    if m.get("method") == "session/update"
                ]
                assert "hi" in "".join(texts)
                assert again.stdin is not None and again.stderr is not None
                again.stdin.close()
                assert again.wait(timeout=30) == 0
                assert "starting a host" not in again.stderr.read()
        finally:
            if host_pid is not None:
                stop_host(host_pid)


def stop_host(pid: int) -> None:
    """SIGTERM the host attach started (not our child: it runs in its own session) and wait
    until it is gone (it exits 0 on a signal)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state == "Z":  # exited; its new parent has not reaped it yet
            return
        time.sleep(0.05)
    raise AssertionError(f"the host {pid} did not stop on SIGTERM")


def test_the_agent_choice_goes_only_into_a_session_new_that_names_none() -> None:
    new = b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/"}}'
    chosen = json.loads(with_agent_choice(new, "claude"))
    assert chosen["params"]["_meta"] == {"acpBridge": {"agent": "claude"}}
    by_command = json.loads(with_agent_choice(new, None, ["my-agent", "--acp"]))
    assert by_command["params"]["_meta"]["acpBridge"] == {"agentCommand": ["my-agent", "--acp"]}
    named = b'{"id":1,"method":"session/new","params":{"_meta":{"acpBridge":{"agent":"x"}}}}'
    assert with_agent_choice(named, "claude") == named
    prompt = b'{"id":2,"method":"session/prompt","params":{"text":"session/new"}}'
    assert with_agent_choice(prompt, "claude") == prompt
    assert with_agent_choice(b"not json session/new", "claude") == b"not json session/new"
    assert with_agent_choice(new, None) == new


def test_attach_usage_errors_are_one_line_and_exit_2() -> None:
    cases = {
        ("--agent", "x", "--", "my-agent"): "give either --agent NAME or -- CMD, not both",
        ("--host", "ws://h/acp", "--socket", "/tmp/s"): "name two hosts; give one",
        ("--token-file", "/tmp/t"): "--token-file goes with --host URL",
        ("--host", "http://h/acp"): "must be a ws:// or wss:// URL",
        ("--exit-when-idle", "0"): "must be a number of seconds > 0",
    }
    for args, expected in cases.items():
        with attach(*args) as editor:
            assert editor.wait(timeout=30) == 2, args
            assert editor.stderr is not None
            lines = editor.stderr.read().strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, lines)


def test_the_host_answers_what_was_asked_before_the_editors_end_of_input() -> None:
    """A pipeline writes its requests and closes stdin at once: the answers still come."""
    with short_dir() as d:
        store = make_store(d)
        with fake_host(d, store=store) as host:
            lines = [
                json.dumps(request(1, "initialize", {"protocolVersion": 1})),
                json.dumps(request(2, "session/new", {"cwd": "/", "mcpServers": []})),
            ]
            result = subprocess.run(
                [sys.executable, "-m", "acp_bridge", "attach", "--socket", str(host.socket),
                 "--store", str(store)],
                input="\n".join(lines) + "\n", capture_output=True, text=True, cwd=ROOT,
                env=ENV, timeout=60,
            )  # fmt: skip
        assert result.returncode == 0, result.stderr
        answers = [json.loads(line) for line in result.stdout.splitlines()]
        assert [a["id"] for a in answers] == [1, 2]
