"""The host on a full disk (the brief's hostile surroundings): the store stops taking writes
mid-run. The conversation that cannot record its turn stops; a prompt waiting on it is told
why and what to do next; the host itself keeps serving (``session/list``), refuses a new
conversation with the store's error, and prints no traceback. The disk is "full" through
RLIMIT_FSIZE (no root, no mount): past it a write fails with EFBIG."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.host.cli_client import ENV, ROOT, LineClient, agent, finish


def file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_stops_the_conversation_says_why_and_the_host_goes_on(
    tmp_path: Path,
) -> None:
    socket_path = tmp_path / "s" / "host.sock"
    argv = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(tmp_path / "q.db"),
            "--socket", str(socket_path), "--", *agent("echo_agent.py")]  # fmt: skip
    host = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT, env=ENV, preexec_fn=file_size_limit(600_000),
    )  # fmt: skip
    try:
        assert host.stderr is not None
        assert "serving" in host.stderr.readline()
        client = LineClient(socket_path)
        assert "result" in client.request("initialize", {"protocolVersion": 1})
        new = {"cwd": str(tmp_path), "mcpServers": []}
        sid = client.request("session/new", new)["result"]["sessionId"]
        failed = None
        for i in range(400):  # each turn logs its 8 KB prompt: the limit comes well before
            text = f"echo {i} " + "y" * 8000
            answer = client.request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
            )
            if "error" in answer:
                failed = answer["error"]
                break
            assert answer["result"] == {"stopReason": "end_turn"}, answer
        assert failed is not None, "the store never filled up"
        message = failed["message"]
        assert "disk I/O error" in message or "full" in message, message
        assert "Once the store can be written again" in message, message
        if message.startswith("the conversation stopped: "):  # the store filled logging a turn
            assert failed["data"]["acpBridge"]["error"]["recoverable"] is True
        else:  # ... or storing the message itself: it was not stored, and is to be sent again
            assert message.startswith("the message was not stored: "), message
            assert message.endswith("send it again"), message
        listed = client.request("session/list", {})["result"]["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]  # the host goes on
        refused = client.request("session/new", new)  # fails where the store first cannot write
        assert "error" in refused, refused
        assert "disk I/O error" in refused["error"]["message"] or "full" in json.dumps(refused)
        client.close()
    finally:
        stderr = finish(host, signal.SIGTERM)
    assert host.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
