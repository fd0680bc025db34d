"""A raw NDJSON editor for driving the real ``acp-bridge proxy`` process (or an agent directly).

It writes lines as given and keeps every line it reads, so tests can compare bytes. Waiting is
on lines arriving (with a bound), never on sleeps.

The proxy runs on the test's anyio backend (``ACP_BRIDGE_PROXY_BACKEND``). The central
scenarios run on both backends; the others are pinned to one each, half on asyncio and half on
trio, so both backends see every kind of path within the suite's time budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import sniffio
from anyio.abc import Process

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
WAIT_S = 20.0


def agent(script: str, *flags: str) -> list[str]:
    return [sys.executable, "-u", str(AGENTS / script), *flags]


def proxy(*options: str, agent_argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "acp_bridge", "proxy", *options, "--", *agent_argv]


def dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


class Editor:
    """One end of an ACP connection over a child's stdin/stdout."""

    def __init__(self, process: Process) -> None:
        self.process = process
        assert process.stdin is not None and process.stdout is not None
        self._buffer = b""
        self.lines: list[bytes] = []
        """Every line read, in order."""
        self._next_id = 0

    async def send_raw(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line + b"\n")

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_raw(dumps(message))

    async def request(self, method: str, params: dict[str, Any]) -> int:
        request_id = self._next_id
        self._next_id += 1
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def receive(self) -> dict[str, Any]:
        """The next message (raises EndOfStream when the proxy closed its stdout)."""
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.process.stdout.receive()
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        self.lines.append(line)
        message: dict[str, Any] = json.loads(line)
        return message

    async def until(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        seen: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Read until a message matches; the ones before it go to ``seen``."""
        with anyio.fail_after(WAIT_S):
            while True:
                message = await self.receive()
                if predicate(message):
                    return message
                if seen is not None:
                    seen.append(message)

    async def response(
        self, request_id: Any, seen: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        return await self.until(
            lambda m: m.get("id") == request_id and "method" not in m, seen=seen
        )

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.response(await self.request(method, params))

    async def handshake(self, cwd: str = "/tmp") -> str:
        init = await self.call(
            "initialize", {"protocolVersion": 1, "clientInfo": {"name": "t", "version": "1"}}
        )
        assert "result" in init, init
        new = await self.call("session/new", {"cwd": cwd, "mcpServers": []})
        session_id: str = new["result"]["sessionId"]
        return session_id

    async def close_and_wait(self) -> int:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with anyio.fail_after(WAIT_S):
            assert self.process.stdout is not None
            async for _ in self.process.stdout:  # drain until the proxy closes its stdout
                pass
            return await self.process.wait()


def prompt_params(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def chunk_text(message: dict[str, Any]) -> str | None:
    if message.get("method") != "session/update":
        return None
    update = message["params"]["update"]
    if update.get("sessionUpdate") != "agent_message_chunk":
        return None
    text: str = update["content"].get("text", "")
    return text


@asynccontextmanager
async def open_editor(
    argv: list[str], *, cwd: str | None = None, backend: str | None = None
) -> AsyncIterator[Editor]:
    """Start ``argv`` (the proxy or an agent) and talk to it; killed if still running at exit.
    The proxy runs on the test's anyio backend."""
    if backend is None:
        backend = sniffio.current_async_library()
    process = await anyio.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        env={**ENV, "ACP_BRIDGE_PROXY_BACKEND": backend},
        cwd=cwd or str(ROOT),
        start_new_session=True,
    )
    try:
        yield Editor(process)
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await process.wait()
        await process.aclose()
