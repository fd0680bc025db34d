"""A blocking client of a host's socket for the tests of the real ``acp-bridge serve``
(stdlib socket, one JSON message a line), and the command's process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def agent(script: str, *flags: str) -> list[str]:
    return [sys.executable, "-u", str(AGENTS / script), "--quiet", *flags]


def start_serve(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """``acp-bridge serve ARGS``, returned once it said it serves (its stderr's first line);
    ``env``: variables set for it on top of the suite's."""
    process = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "serve", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**ENV, **(env or {})},
    )
    assert process.stderr is not None
    first = process.stderr.readline()
    assert "serving" in first, first + process.stderr.read()
    return process


class LineClient:
    """Requests and the notifications that came meanwhile, blocking, with a timeout."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.file = self.sock.makefile("rb")
        self.notifications: list[dict[str, Any]] = []
        self._next = 0

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        """The response (result or error) to a request; notifications are kept."""
        self._next += 1
        ident = self._next
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}})
        while True:
            message = self.read()
            if message.get("id") == ident and "method" not in message:
                return message
            self.notifications.append(message)

    def read(self) -> dict[str, Any]:
        line = self.file.readline()
        if not line:
            raise EOFError("the host closed the connection")
        message: dict[str, Any] = json.loads(line)
        return message

    def read_until(self, predicate: Any) -> dict[str, Any]:
        """Read notifications until one satisfies ``predicate``; returns it."""
        while True:
            message = self.read()
            self.notifications.append(message)
            if predicate(message):
                return message


def finish(process: subprocess.Popen[str], sig: int | None = None, timeout: float = 60) -> str:
    """Signal ``process`` (if given and still running), wait for it, close its pipes; its
    stderr after the first line."""
    if sig is not None and process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.stderr is not None and process.stdout is not None
    text = process.stderr.read()
    process.stderr.close()
    process.stdout.close()
    return text
