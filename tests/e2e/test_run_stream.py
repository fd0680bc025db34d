"""``acp-bridge run --json`` loses nothing at the end of a fast stream (issue 8, defect 1).

Agents on the TypeScript SDK write a fast turn in large bursts, the answer included. The
``burst`` step of the fake agents writes the whole turn (every chunk, then the prompt's answer)
in one ``os.write``: every ``update`` must reach stdout, in order, then ``turn_ended``, before
the process exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_run import ENV, ROOT

ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]


def run_json(tmp_path: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """``acp-bridge run --json`` with a fresh store: exit code, events, stderr."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "acp_bridge",
            "run",
            "--json",
            "--store",
            str(tmp_path / "s.db"),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=ENV,
        timeout=120,
    )
    events = [json.loads(line) for line in result.stdout.splitlines()]
    return result.returncode, events, result.stderr


@pytest.mark.parametrize("count", [1, 5000])
def test_every_event_of_a_turn_written_in_one_burst_reaches_stdout(
    tmp_path: Path, count: int
) -> None:
    code, seen, stderr = run_json(tmp_path, "-m", f"burst {count}", "-m", "echo after", "--", *ECHO)
    assert code == 0, (stderr, [e for e in seen if e["event"] != "update"])
    first = [e for e in seen if e["event"] == "update" and e["seq"] == 1]
    texts = [e["update"]["content"]["text"] for e in first]
    assert texts == [f"burst-1-{i} " for i in range(count)]
    kinds = [e["event"] for e in seen]
    assert kinds.count("turn_ended") == 2
    ended = [e for e in seen if e["event"] == "turn_ended"]
    assert [e["stopReason"] for e in ended] == ["end_turn", "end_turn"]
    # Causal order: the first turn's updates all come before its turn_ended.
    assert kinds.index("turn_ended") > max(i for i, e in enumerate(seen) if e in first)
    stamps = [e["ts"] for e in seen]
    assert stamps == sorted(stamps)


def test_events_across_a_crash_and_restore_are_in_causal_order(tmp_path: Path) -> None:
    """Issue 8, defect 10: ``session_restored`` used to print after the next message's
    ``turn_started``, and ``turn_failed`` after ``agent_restarted``; ``ts`` went backwards."""
    _code, seen, _stderr = run_json(
        tmp_path,
        "-m",
        "echo one; crash KILL",
        "-m",
        "echo two",
        "--",
        *ECHO,
        "--history",
        str(tmp_path / "history.json"),
    )
    kinds = [e["event"] for e in seen]
    stamps = [e["ts"] for e in seen]
    assert stamps == sorted(stamps), kinds
    order = [
        kinds.index("agent_exited"),
        kinds.index("turn_failed"),
        kinds.index("agent_restarted"),
        kinds.index("session_restored"),
        max(i for i, e in enumerate(seen) if e["event"] == "turn_started"),
    ]
    assert order == sorted(order), kinds
    second = next(e for e in seen if e["event"] == "turn_started" and e["seq"] == 2)
    assert seen.index(second) > kinds.index("session_restored")
