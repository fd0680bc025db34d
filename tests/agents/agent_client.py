"""A raw ACP client for the reference agent's tests: acp-bridge's own JsonRpcPeer on the
agent's pipes, a small real fs/terminal/permission side, and every frame kept for checking.

The agent runs as a subprocess (``python -m acp_bridge agent --mock-script ...``), so litellm's
import is paid in the child, once per agent process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process, TaskGroup

from acp_bridge.errors import RpcError
from acp_bridge.rpc.peer import JsonRpcPeer

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "fixtures" / "mock_scripts" / "agent_tests.json"

requires_litellm = pytest.mark.skipif(
    importlib.util.find_spec("litellm") is None,
    reason="the agent extra is not installed (pip install -e '.[agent]'); litellm is missing",
)


def agent_argv(history: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "acp_bridge",
        "agent",
        "--mock-script",
        str(SCRIPT),
        "--history",
        str(history),
        "--max-turn-requests",
        "3",
        "--retry-delay",
        "0.01",
        "--models",
        "gpt-4o",
        *extra,
    ]


def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


PermissionAnswer = Callable[[dict[str, Any]], Any]


class RawClient:
    def __init__(self, process: Process, task_group: TaskGroup) -> None:
        self.process = process
        self.peer = JsonRpcPeer(process.stdout, process.stdin, name="agent")  # type: ignore[arg-type]
        self.incoming: list[bytes] = []
        self.sent_methods: dict[Any, str] = {}
        self.updates: list[dict[str, Any]] = []
        self.permissions: list[dict[str, Any]] = []
        self.permission_answer: PermissionAnswer = lambda _: "allow"
        self.cancel_notices = 0
        self.errors_answered: list[dict[str, Any]] = []
        """Every error this client answered one of the agent's requests with."""
        self._changed = anyio.Event()
        self._terminals: dict[str, dict[str, Any]] = {}
        self._task_group = task_group
        self.peer.add_observer(self._observe)
        self.peer.on_notification("session/update", self._on_update)
        for method, handler in {
            "session/request_permission": self._permission,
            "fs/read_text_file": self._read,
            "fs/write_text_file": self._write,
            "terminal/create": self._terminal_create,
            "terminal/wait_for_exit": self._terminal_wait,
            "terminal/output": self._terminal_output,
            "terminal/release": self._terminal_release,
            "terminal/kill": self._terminal_release,
        }.items():
            self.peer.on_request(method, handler)

    # -- what the agent sent ----------------------------------------------------------

    def _observe(self, direction: str, line: bytes) -> None:
        if direction == "in":
            self.incoming.append(line)
            if b'"$/cancel_request"' in line:
                self.cancel_notices += 1
            self._poke()
            return
        message = json.loads(line)
        if "method" in message and "id" in message:
            self.sent_methods[message["id"]] = message["method"]
        elif "error" in message:
            self.errors_answered.append(message["error"])

    def _on_update(self, params: Any) -> None:
        self.updates.append(params["update"])
        self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    def requests_received(self, method: str) -> list[dict[str, Any]]:
        """The params of every request the agent sent this client with this method."""
        found = []
        for line in self.incoming:
            message = json.loads(line)
            if message.get("method") == method and "id" in message:
                found.append(message["params"])
        return found

    def kinds(self, start: int = 0) -> list[str]:
        return [u["sessionUpdate"] for u in self.updates[start:]]

    def text(self, start: int = 0, kind: str = "agent_message_chunk") -> str:
        return "".join(
            u["content"]["text"] for u in self.updates[start:] if u["sessionUpdate"] == kind
        )

    # -- calls ------------------------------------------------------------------------

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await self.peer.request(method, params)

    async def send_raw(self, *messages: dict[str, Any]) -> None:
        """Write these messages to the agent in one write (the peer does not see them go)."""
        assert self.process.stdin is not None
        data = b"".join(json.dumps(m).encode() + b"\n" for m in messages)
        for message in messages:
            if "id" in message and "method" in message:
                self.sent_methods[message["id"]] = message["method"]
        await self.process.stdin.send(data)

    async def raw_answer(self, request_id: str) -> dict[str, Any]:
        """The answer to a request sent with :meth:`send_raw`."""
        found: list[dict[str, Any]] = []

        def answered() -> bool:
            for line in self.incoming:
                if request_id.encode() in line:
                    message = json.loads(line)
                    if message.get("id") == request_id and "method" not in message:
                        found.append(message)
                        return True
            return False

        await self.wait_for(answered)
        return found[0]

    async def initialize(self, *, fs: bool = True, terminal: bool = True) -> Any:
        capabilities = {"fs": {"readTextFile": fs, "writeTextFile": fs}, "terminal": terminal}
        return await self.call(
            "initialize", {"protocolVersion": 1, "clientCapabilities": capabilities}
        )

    async def prompt(self, session_id: str, text: str) -> Any:
        blocks = [{"type": "text", "text": text}]
        return await self.call("session/prompt", {"sessionId": session_id, "prompt": blocks})

    # -- the client side ----------------------------------------------------------------

    async def _permission(self, params: Any) -> Any:
        self.permissions.append(params)
        self._poke()
        answer = self.permission_answer(params)
        if hasattr(answer, "__await__"):
            answer = await answer
        if answer is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": answer}}

    async def _read(self, params: Any) -> Any:
        try:
            return {"content": await anyio.Path(params["path"]).read_text()}
        except FileNotFoundError:
            raise RpcError.resource_not_found(params["path"]) from None

    async def _write(self, params: Any) -> Any:
        await anyio.Path(params["path"]).write_text(params["content"])
        return {}

    async def _terminal_create(self, params: Any) -> Any:
        terminal_id = f"t{len(self._terminals)}"
        state: dict[str, Any] = {"done": anyio.Event(), "scope": anyio.CancelScope()}
        self._terminals[terminal_id] = state

        async def run() -> None:
            with state["scope"]:
                result = await anyio.run_process(
                    [params["command"], *params.get("args", [])],
                    cwd=params.get("cwd"),
                    check=False,
                )
                state["output"] = result.stdout.decode() + result.stderr.decode()
                state["code"] = result.returncode
            state["done"].set()

        self._task_group.start_soon(run)
        return {"terminalId": terminal_id}

    async def _terminal_wait(self, params: Any) -> Any:
        state = self._terminals[params["terminalId"]]
        await state["done"].wait()
        return {"exitCode": state.get("code")}

    async def _terminal_output(self, params: Any) -> Any:
        state = self._terminals[params["terminalId"]]
        return {"output": state.get("output", ""), "truncated": False}

    async def _terminal_release(self, params: Any) -> Any:
        state = self._terminals[params["terminalId"]]
        state["scope"].cancel()
        state["released"] = True
        self._poke()
        return {}

    def terminals_released(self) -> bool:
        return all(state.get("released") for state in self._terminals.values())


@asynccontextmanager
async def open_agent_client(argv: list[str]) -> AsyncIterator[RawClient]:
    async with anyio.create_task_group() as tg:
        process = await anyio.open_process(argv, env=agent_env(), stderr=None)
        client = RawClient(process, tg)
        await tg.start(client.peer.run)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.peer.aclose()
                if process.stdin is not None:
                    await process.stdin.aclose()
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            tg.cancel_scope.cancel()


# -- the official SDK as schema oracle ----------------------------------------------------

_REQUESTS = {
    "session/request_permission": "RequestPermissionRequest",
    "fs/read_text_file": "ReadTextFileRequest",
    "fs/write_text_file": "WriteTextFileRequest",
    "terminal/create": "CreateTerminalRequest",
    "terminal/output": "TerminalOutputRequest",
    "terminal/wait_for_exit": "WaitForTerminalExitRequest",
    "terminal/release": "ReleaseTerminalRequest",
    "terminal/kill": "KillTerminalRequest",
}
_RESULTS = {
    "initialize": "InitializeResponse",
    "authenticate": "AuthenticateResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/close": "CloseSessionResponse",
    "session/prompt": "PromptResponse",
    "session/set_mode": "SetSessionModeResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
}


def check_against_sdk(lines: list[bytes], sent_methods: dict[Any, str]) -> int:
    """Validate every frame the agent wrote with the official SDK's schema models; every line
    must be a JSON-RPC 2.0 frame. Returns how many frames were checked."""
    from acp import schema

    for line in lines:
        message = json.loads(line)  # a non-JSON line on stdout fails here
        assert message.get("jsonrpc") == "2.0", line
        method = message.get("method")
        if method == "session/update":
            schema.SessionNotification.model_validate(message["params"])
        elif method == "$/cancel_request":
            schema.CancelRequestNotification.model_validate(message["params"])
        elif method is not None:
            getattr(schema, _REQUESTS[method]).model_validate(message["params"])
        elif "result" in message:
            model = _RESULTS[sent_methods[message["id"]]]
            getattr(schema, model).model_validate(message["result"] or {})
        else:
            assert set(message["error"]) <= {"code", "message", "data"}, line
            assert isinstance(message["error"]["message"], str)
    return len(lines)
