"""fixtures/agents/stamp_agent.py (the host's ``send`` benchmark): the echo agent that appends
``<time.time()> <prompt text>`` to $STAMP_AGENT_FILE when a prompt line reaches its stdin, taken
before the prompt is handled. Driven over raw pipes; each read waits for the agent's answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

AGENT = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "stamp_agent.py"


def _request(ident: int, method: str, params: Any) -> bytes:
    message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
    return json.dumps(message).encode() + b"\n"


def test_each_prompt_is_stamped_on_arrival_and_still_echoed(tmp_path: Path) -> None:
    stamps = tmp_path / "stamps.txt"
    before = time.time()
    with subprocess.Popen(
        [sys.executable, "-u", str(AGENT), "--quiet"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "STAMP_AGENT_FILE": str(stamps)},
    ) as agent:
        assert agent.stdin is not None and agent.stdout is not None

        def call(ident: int, method: str, params: Any) -> Any:
            assert agent.stdin is not None and agent.stdout is not None
            agent.stdin.write(_request(ident, method, params))
            agent.stdin.flush()
            while (message := json.loads(agent.stdout.readline())).get("id") != ident:
                pass  # the turn's updates
            return message["result"]

        call(1, "initialize", {"protocolVersion": 1})
        session = call(2, "session/new", {"cwd": str(tmp_path), "mcpServers": []})["sessionId"]
        for n, text in enumerate(["hello there", "two\nlines"]):
            prompt = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
            assert call(3 + n, "session/prompt", prompt) == {"stopReason": "end_turn"}
        agent.stdin.close()
        assert agent.wait(timeout=30) == 0
    lines = stamps.read_text().splitlines()
    assert [line.partition(" ")[2] for line in lines] == ["hello there", "two lines"]
    times = [float(line.partition(" ")[0]) for line in lines]
    assert before <= times[0] <= times[1] <= time.time()
