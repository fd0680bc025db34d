"""Third-party ACP clients on the conversation host (issue 22's tests), mirroring how
tests/proxy/test_sdk_interop.py and scripts/interop.py run them against the proxy:

* the official Python SDK client (tests/interop/sdk_client.py) and the TypeScript SDK client
  (tests/interop/node/client.mjs), each with ``acp-bridge attach`` as their agent command:
  attach starts a host (``serve --exit-when-idle``) with the echo fixture agent behind it;
* acpx (pinned in tests/interop/node/package.json) through ``attach``: a prompt in one acpx
  invocation, and the same session in a second one after the first one's queue owner is gone;
* the TypeScript SDK 2.4.0's own WebSocket client transport (tests/interop/node/ws_client.mjs)
  against the real ``serve --listen``.

Each is skipped, with one line saying why, when its peer is missing.
"""

from __future__ import annotations

import hashlib
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


def attach_argv(directory: Path, agent_argv: list[str] | None = None) -> list[str]:
    """``acp-bridge attach`` as an editor's agent command: a host of its own on
    ``directory``, started on first use, with the echo fixture agent. The checkout under test
    is named with ``env PYTHONPATH=``: the Python SDK gives its agent a trimmed environment."""
    return [
        "env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "acp_bridge", "attach",
        "--socket", str(directory / "run" / "host.sock"),
        "--store", str(directory / "q.db"),
        "--exit-when-idle", "60",
        "--", *(agent_argv or agent("echo_agent.py")),
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
    """Both ends on the official TypeScript SDK (its client, and its agent behind the host)."""
    argv = ["node", str(node_sdk / "client.mjs"), json.dumps(["hello world", "echo again"])]
    ts_agent = ["node", str(node_sdk / "agent.mjs")]
    try:
        result = subprocess.run(
            [*argv, "--", *attach_argv(directory, agent_argv=ts_agent)],
            capture_output=True, text=True, cwd=directory, env=ENV, timeout=150,
        )  # fmt: skip
        summary = _summary(result)
    finally:
        stop_started_host(directory)
    assert "error" not in summary, summary
    assert summary["protocolVersion"] == 1 and summary["sessionId"]
    assert summary["turns"] == ["end_turn", "end_turn"]
    assert summary["chunks"] == ["hello ", "world ", "echo ", "again "]
    # An extension request naming no session, on a connection attached to one conversation,
    # reaches that conversation's agent with its params unchanged, as through the proxy.
    assert summary["ext"] == {"echo": {"a": 1}, "method": "_ext.example/hello"}
    assert summary["agentExit"] == 0  # attach detached on the client's end of input


def _acpx(acpx: Path, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One acpx invocation with ``acp-bridge attach`` as its raw agent command (``--agent``),
    in ``directory`` with ``directory`` as HOME: acpx keeps its session records and queue
    leases under ``~/.acpx``, so nothing of the user's is read or written."""
    command = " ".join(attach_argv(directory, agent_argv=_acpx_agent(directory)))
    return subprocess.run(
        ["node", str(acpx), "--agent", command, "--approve-all", *args],
        capture_output=True, text=True, cwd=directory, env={**ENV, "HOME": str(directory)},
        timeout=120,
    )  # fmt: skip


def _acpx_agent(directory: Path) -> list[str]:
    # --history: the echo agent behind a second host restores its own session too.
    return agent("echo_agent.py", "--history", str(directory / "agent-history.json"))


def _acpx_socket_dir(home: Path) -> Path:
    """Where acpx 0.19.1 puts its queue owners' sockets for the HOME ``home``: always under
    ``/tmp`` (it does not read TMPDIR), named by a hash of HOME, and never removed by acpx."""
    return Path("/tmp") / f"acpx-{hashlib.sha256(str(home).encode()).hexdigest()[:10]}"


def _stop_acpx(directory: Path) -> None:
    """Nothing of an acpx invocation left running: SIGTERM every acpx queue owner under this
    HOME and wait until it is gone, then the host attach started, if it still runs.

    The queue owner outlives the invocation that started it (``--ttl``, 300 s by default) and
    holds our attach; it names its pid in its lease, ``~/.acpx/queues/*.lock``. On SIGTERM it
    retires: it closes the agent's stdin and SIGTERMs every process it saw descend from the
    agent, the host attach started included (acpx does the same when an invocation without
    an owner, ``sessions new``, ends its agent)."""
    for lease in (directory / ".acpx" / "queues").glob("*.lock"):
        try:
            pid = json.loads(lease.read_text())["pid"]
        except (OSError, ValueError, KeyError):
            continue
        stop_host(pid)
    stop_started_host(directory)


def _chunks(ndjson: str, kind: str = "agent_message_chunk") -> tuple[set[str], str]:
    """The session ids and the joined text of ``kind`` updates in acpx's ``--format json``
    output (NDJSON of the ACP messages)."""
    sessions: set[str] = set()
    text = ""
    for line in ndjson.splitlines():
        message = json.loads(line)
        if message.get("method") != "session/update":
            continue
        sessions.add(message["params"]["sessionId"])
        update = message["params"]["update"]
        if update["sessionUpdate"] == kind:
            text += update["content"]["text"]
    return sessions, text


def test_acpx_through_attach(node_sdk: Path, directory: Path) -> None:
    """acpx 0.19.1 (``--agent`` naming ``acp-bridge attach``): a persistent session made with
    ``sessions new``, a prompt, then the same session from a second invocation with a new
    attach and a new host: the conversation came through the store, both turns replay."""
    acpx = node_sdk / "node_modules" / "acpx" / "dist" / "cli.js"
    if not acpx.is_file():
        pytest.skip("acpx is not installed in tests/interop/node")
    try:
        made = _acpx(acpx, directory, "sessions", "new")
        assert made.returncode == 0, made.stdout + made.stderr
        session_id = made.stdout.strip().splitlines()[-1]
        _stop_acpx(directory)
        # First invocation: acpx's queue owner starts attach, attach starts the host.
        first = _acpx(acpx, directory, "prompt", "echo hello from acpx")
        assert first.returncode == 0, first.stdout + first.stderr
        assert "hello from acpx" in first.stdout and "[done] end_turn" in first.stdout
        # The first invocation's queue owner and host are gone before the second one, which
        # starts a new attach, which starts a new host on the same store.
        _stop_acpx(directory)
        # Second invocation, same session: acpx resumes it from the new host.
        second = _acpx(acpx, directory, "--format", "json", "prompt", "echo again")
        assert second.returncode == 0, second.stdout + second.stderr
        assert _chunks(second.stdout) == ({session_id}, "again")
        # The host holds the whole conversation: both invocations' turns replay on a load.
        client = LineClient(directory / "run" / "host.sock")
        try:
            client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            load = {"sessionId": session_id, "cwd": str(directory), "mcpServers": []}
            loaded = client.request("session/load", load)
        finally:
            client.close()
        assert "result" in loaded, loaded
        replay = "\n".join(json.dumps(n) for n in client.notifications)
        assert _chunks(replay, "user_message_chunk")[1] == "echo hello from acpxecho again"
        assert _chunks(replay) == ({session_id}, "hello from acpxagain")
    finally:
        _stop_acpx(directory)
        shutil.rmtree(_acpx_socket_dir(directory), ignore_errors=True)  # ours: our HOME's hash


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
