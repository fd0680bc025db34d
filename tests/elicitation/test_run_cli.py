"""``run`` and the agent's questions and newer updates, through the real process: an
elicitation is declined with a one-line hint (the exit code unchanged); ``notice``,
``compaction_update`` and ``compaction_summary_chunk`` get a line each in plain output and pass
through ``--json`` unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_run_start_auth_ask import BRIDGE, ENV

ROOT = Path(__file__).resolve().parents[2]
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py")]


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BRIDGE, "--store", str(tmp_path / "s.db"), *args, "--", *ECHO],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=ENV,
        timeout=60,
        start_new_session=True,
    )


def test_run_declines_a_form_with_a_hint_and_exits_0(tmp_path: Path) -> None:
    result = run(tmp_path, "-m", "elicit form; echo after")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "elicit form decline nullafter\n"
    hints = [line for line in result.stderr.splitlines() if "declined" in line]
    assert len(hints) == 1, result.stderr
    assert "a form (Tell me about yourself)" in hints[0]
    assert "use chat" in hints[0] and "acp-bridge serve" in hints[0]


def test_run_declines_a_url_naming_it(tmp_path: Path) -> None:
    result = run(tmp_path, "-m", "elicit url")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "elicit url decline null\n"
    assert "https://example.com/connect?elicitationId=fake-url-1" in result.stderr


def test_plain_output_shows_notice_and_compaction(tmp_path: Path) -> None:
    result = run(tmp_path, "-m", "notice warning Rate limited; compaction; compaction failed")
    assert result.returncode == 0, result.stderr
    err = result.stderr.splitlines()
    assert "[notice] warning: Rate limited - Retrying in 20 s" in err
    assert err.count("[compaction] in_progress") == 2
    assert err.count("[compaction summary] We fixed the tests.") == 2
    assert "[compaction] completed" in err
    assert "[compaction] failed: context too large" in err


def test_json_passes_the_new_updates_unchanged(
    tmp_path: Path,
) -> None:
    result = run(tmp_path, "--json", "-m", "notice info Hello; compaction")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    updates = [e["update"] for e in events if e["event"] == "update"]
    kinds = [u["sessionUpdate"] for u in updates]
    assert kinds[:5] == [
        "notice",
        "compaction_update",
        "compaction_summary_chunk",
        "compaction_summary_chunk",
        "compaction_update",
    ]
    assert updates[0] == {
        "sessionUpdate": "notice",
        "severity": "info",
        "title": "Hello",
        "description": "Retrying in 20 s",
    }
    assert updates[2] == {
        "sessionUpdate": "compaction_summary_chunk",
        "compactionId": "compaction-1",
        "content": {"type": "text", "text": "We fixed "},
    }
