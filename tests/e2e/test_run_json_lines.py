"""Issue #21 item 26: ``run --json`` encodes its events with pydantic-core's encoder instead of a
``json.dumps`` per event with options (which built an encoder each time). A flood read slowly
through a pipe still arrives as one whole JSON line per event, in order, with non-decreasing
``ts``, the last one before the exit; the encoding matches the standard library's."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.e2e.test_run_start_auth_ask import BRIDGE, ECHO, ENV

CHUNKS = 3000


def test_a_flood_read_slowly_arrives_whole_in_order(tmp_path: Path) -> None:
    flood = [*ECHO, "--quiet", "--prompt-words", "--chunks", str(CHUNKS)]
    with subprocess.Popen(
        [*BRIDGE, "--json", "--store", str(tmp_path / "s.db"), "-m", "echo", "--", *flood],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=ENV,
        start_new_session=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        stderr = process.stderr
        errors: list[bytes] = []
        drain = threading.Thread(target=lambda: errors.append(stderr.read()))
        drain.start()
        received = bytearray()
        # Small reads while the agent floods: the pipe fills and the bridge's writes wait.
        while chunk := process.stdout.read1(512):
            received += chunk
        assert process.wait(timeout=60) == 0, errors
        drain.join(timeout=10)
    events: list[dict[str, Any]] = [json.loads(line) for line in received.splitlines()]
    updates = [e for e in events if e["event"] == "update"]
    assert len(updates) == CHUNKS
    assert events[-1]["event"] == "turn_ended" and events[-1]["state"] == "done"
    stamps = [e["ts"] for e in events]
    assert stamps == sorted(stamps)
    for line in received.splitlines()[-3:]:  # compact, UTF-8 as is: as json.dumps wrote them
        value = json.loads(line)
        assert line.decode() == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert received.endswith(b"}\n")
