"""The real ``acp-bridge serve --listen`` and ``acp-bridge attach --host`` for the tests: a
host process on a short private directory, the URL it printed, and an editor's lines.

``serve --listen 127.0.0.1:0`` binds a free port and prints it: after the ``serving`` line,
stderr says ``listening at ws://127.0.0.1:PORT/acp (bearer token in FILE...)``. The tests read
that line, never a time.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.host.cli_client import ROOT, agent, finish
from tests.verbs.fake_hosts import ENV

_URL = re.compile(r"listening at (wss?://\S+) \(bearer token in (.+?)(, made now.*)?\)$")


@dataclass
class ListeningHost:
    process: subprocess.Popen[str]
    url: str
    token_file: Path
    socket: Path
    store: Path
    made_token: bool
    said: str
    """Its stderr up to the ``listening at`` line."""


def serve_argv(directory: Path, *flags: str, agent_argv: list[str] | None = None) -> list[str]:
    argv = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(directory / "q.db")]
    argv += ["--socket", str(directory / "s" / "host.sock"), *flags, "--"]
    return argv + (agent_argv or agent("echo_agent.py"))


@contextmanager
def listening_host(
    directory: Path, *flags: str, agent_argv: list[str] | None = None
) -> Iterator[ListeningHost]:
    """``serve --listen`` (``flags`` hold it) running, stopped with SIGTERM at the end (and
    checked: exit 0, no traceback)."""
    process = subprocess.Popen(
        serve_argv(directory, *flags, agent_argv=agent_argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    assert process.stderr is not None
    said = ""
    while True:
        line = process.stderr.readline()
        said += line
        found = _URL.search(line.rstrip("\n"))
        if found is not None or not line:
            break
    if found is None:
        raise AssertionError(f"serve --listen did not listen: {said}{finish(process, 9)}")
    try:
        yield ListeningHost(
            process,
            found.group(1),
            Path(found.group(2)),
            directory / "s" / "host.sock",
            directory / "q.db",
            found.group(3) is not None,
            said,
        )
    finally:
        rest = finish(process, signal.SIGTERM)
    assert process.returncode == 0, said + rest
    assert "Traceback" not in rest, rest


@contextmanager
def attach(*args: str) -> Iterator[subprocess.Popen[str]]:
    """``acp-bridge attach ARGS``: the test is its editor, on its stdin and stdout."""
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
        if seen[-1].get("id") == message["id"] and "method" not in seen[-1]:
            return seen
    raise AssertionError(f"attach's stdout ended before the answer to {message['method']}")


def request(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def texts(messages: list[dict[str, Any]], kind: str = "agent_message_chunk") -> str:
    """The text of the ``session/update``s of ``kind`` among ``messages``, joined."""
    return "".join(
        str(m["params"]["update"].get("content", {}).get("text", ""))
        for m in messages
        if m.get("method") == "session/update"
        and m["params"]["update"].get("sessionUpdate") == kind
    )


def one_turn(editor: subprocess.Popen[str], cwd: Path, text: str) -> tuple[str, str, str]:
    """initialize, session/new and one prompt through ``editor`` (an attach): the session
    id, the streamed text and the stopReason."""
    init = call(editor, request(1, "initialize", {"protocolVersion": 1}))
    assert init[-1]["result"]["agentInfo"]["name"] == "acp-bridge-host", init[-1]
    new = call(editor, request(2, "session/new", {"cwd": str(cwd), "mcpServers": []}))
    session = new[-1]["result"]["sessionId"]
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    turn = call(editor, request(3, "session/prompt", prompt))
    return session, texts(turn), turn[-1]["result"]["stopReason"]


def detach(editor: subprocess.Popen[str]) -> str:
    """Close the editor's end; attach exits 0 (detached). Its stderr."""
    assert editor.stdin is not None and editor.stderr is not None
    editor.stdin.close()
    assert editor.wait(timeout=30) == 0
    return editor.stderr.read()
