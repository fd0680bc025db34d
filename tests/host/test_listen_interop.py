"""Third-party ACP clients on the conversation host (issue 22's tests), mirroring how
tests/proxy/test_sdk_interop.py and scripts/interop.py run them against the proxy:

* the official Python SDK client (tests/interop/sdk_client.py) and the TypeScript SDK client
  (tests/interop/node/client.mjs), each with ``acp-bridge attach`` as their agent command:
  attach starts a host (``serve --exit-when-idle``) with the echo fixture agent behind it;
* acpx through ``attach``, where acpx is installed (it is not a dependency of the suite);
* the TypeScript SDK 2.4.0's own WebSocket client transport (tests/interop/node/ws_client.mjs)
  against the real ``serve --listen``.

Each is skipped, with one line saying why, when its peer is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.host.cli_client import ROOT, LineClient, agent
from tests.host.listen_cli import ENV, listening_host
from tests.node_sdk import ensure_node_sdk
from tests.verbs.fake_hosts import short_dir
from tests.verbs.test_attach import stop_host

pytestmark = pytest.mark.timeout(180)

NODE_DIR = ROOT / "tests" / "interop" / "node"


@pytest.fixture
def directory() -> Iterator[Path]:
    with short_dir() as path:  # a Unix socket path holds at most 107 bytes
        yield path


@pytest.fixture
def node_sdk() -> Path:
    return ensure_node_sdk()  # skips, with the reason, when node or npm is missing


def attach_argv(directory: Path) -> list[str]:
    """``acp-bridge attach`` as an editor's agent command: a host of its own on
    ``directory``, started on first use, with the echo fixture agent. The checkout under test
    is named with ``env PYTHONPATH=``: the Python SDK gives its agent a trimmed environment."""
    return [
        "env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "acp_bridge", "attach",
        "--socket", str(directory / "run" / "host.sock"),
        "--store", str(directory / "q.db"),
        "--exit-when-idle", "60",
        "--", *agent("echo_agent.py"),
    ]  # fmt: skip


def stop_started_host(directory: Path) -> None:
    """SIGTERM the host the first attach started (it is no child of ours), found by its
    hello; nothing when none runs."""
    socket = directory / "run" / "host.sock"
    if not socket.exists():
        return
    try:
        client = LineClient(socket)
    except OSError:
        return
    try:
        pid = client.request("_acp_bridge/hello")["result"]["host"]["pid"]
    finally:
        client.close()
    stop_host(pid)


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def test_the_python_sdk_client_through_attach(directory: Path) -> None:
    pytest.importorskip("acp", reason="the official Python SDK (agent-client-protocol) is missing")
    scenario = {
        "hello": "echo hello from the sdk",
        "expect": "hello from the sdk",
        "slow": "echo slow; wait 60",
        "load": True,  # a second attach process: session/load from the host, then a turn
        "cwd": str(directory),
        "timeout": 30,
    }
    client = [sys.executable, str(ROOT / "tests" / "interop" / "sdk_client.py")]
    try:
        result = subprocess.run(
            [*client, json.dumps(scenario), "--", *attach_argv(directory)],
            capture_output=True, text=True, cwd=directory, env=ENV, timeout=150,
        )  # fmt: skip
        summary = _summary(result)
    finally:
        stop_started_host(directory)
    checks = summary["checks"]
    assert set(checks) == {"initialize", "session/new", "stream", "cancel", "load"}, checks
    assert all(check["ok"] for check in checks.values()), checks
    assert summary["info"]["agentInfo"]["name"] == "acp-bridge-host"
    assert "chunks replayed" in checks["load"]["detail"]


def test_the_typescript_sdk_client_through_attach(node_sdk: Path, directory: Path) -> None:
    argv = ["node", str(node_sdk / "client.mjs"), json.dumps(["hello world", "echo again"])]
    try:
        result = subprocess.run(
            [*argv, "--", *attach_argv(directory)],
            capture_output=True, text=True, cwd=directory, env=ENV, timeout=150,
        )  # fmt: skip
        summary = _summary(result)
    finally:
        stop_started_host(directory)
    assert "error" not in summary, summary
    assert summary["protocolVersion"] == 1 and summary["sessionId"]
    assert summary["turns"] == ["end_turn", "end_turn"]
    assert summary["chunks"] == ["hello ", "world", "again"]
    # An extension request that names no session is the host's to refuse (-32602).
    assert summary["ext"] == {"errorCode": -32602}
    assert summary["agentExit"] == 0  # attach detached on the client's end of input


def test_acpx_through_attach(directory: Path) -> None:
    acpx = shutil.which("acpx") or shutil.which("acpx", path=str(NODE_DIR / "node_modules/.bin"))
    if acpx is None:
        pytest.skip("acpx is not installed (not on PATH nor in tests/interop/node)")
    command = " ".join(attach_argv(directory))
    env = {**ENV, "HOME": str(directory)}  # acpx keeps its sessions under ~/.acpx
    try:
        result = subprocess.run(
            [acpx, "--agent", command, "--approve-all", "exec", "echo hello from acpx"],
            capture_output=True, text=True, cwd=directory, env=env, timeout=150,
        )  # fmt: skip
    finally:
        stop_started_host(directory)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hello from acpx" in result.stdout


def _ws_client(node_dir: Path, url: str, token: str | None) -> dict[str, Any]:
    command = ["node", str(node_dir / "ws_client.mjs"), url, *([token] if token else [])]
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=node_dir, env=ENV, timeout=60
    )
    return _summary(result)


def test_the_typescript_sdk_websocket_client_against_serve_listen(
    node_sdk: Path, directory: Path
) -> None:
    if not (node_sdk / "node_modules" / "acp-sdk-2.4").is_dir():
        pytest.skip("the TypeScript SDK 2.4.0 is not installed in tests/interop/node")
    with listening_host(directory, "--listen", "127.0.0.1:0") as host:
        token = host.token_file.read_text().strip()
        summary = _ws_client(node_sdk, host.url, token)
        assert summary == {
            "protocolVersion": 1,
            "agentName": "acp-bridge-host",
            "sessionId": summary.get("sessionId"),
            "text": "hello",
            "stopReason": "end_turn",
        }, summary
        listed = LineClient(host.socket)
        try:
            listed.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            sessions = listed.request("session/list")["result"]["sessions"]
        finally:
            listed.close()
        assert summary["sessionId"] in [s["sessionId"] for s in sessions]
        refused = _ws_client(node_sdk, host.url, "wrong")
        assert refused == {"error": "Unexpected server response: 401"}
        missing = _ws_client(node_sdk, host.url, None)
        assert missing == {"error": "Unexpected server response: 401"}
