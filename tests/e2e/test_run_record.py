"""``run --record FILE`` (design.md lists it among the common options; ``run`` refused it as an
unknown argument). The proxy's recorder and format: the bridge<->agent traffic of every agent
generation, replayable with ``acp-bridge replay``, and the same hardening: a regular file only,
never through a symbolic link, created 0600."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from tests.e2e.test_run_start_auth_ask import AGENTS, ECHO, run

CRASHY = [sys.executable, "-u", str(AGENTS / "crashy_agent.py"), "--quiet"]


def recorded(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_records_its_traffic_and_the_recording_replays(tmp_path: Path) -> None:
    recording = tmp_path / "run.ndjson"
    result = run(
        "--store", str(tmp_path / "s.db"), "--record", str(recording), "-m", "hello there",
        "--", *ECHO, "--quiet",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(recording.stat().st_mode) == 0o600
    lines = recorded(recording)
    assert {line["dir"] for line in lines} == {"bridge->agent", "agent->bridge"}
    methods = [line["msg"].get("method") for line in lines if line["dir"] == "bridge->agent"]
    assert methods == ["initialize", "session/new", "session/prompt"]
    assert all(isinstance(line["t"], float) for line in lines)

    replayed = run(
        "--store", str(tmp_path / "s2.db"), "-m", "hello there",
        "--", sys.executable, "-m", "acp_bridge", "replay", str(recording),
        cwd=tmp_path,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == "hello there\n"


def test_every_generation_is_recorded_after_a_restart(tmp_path: Path) -> None:
    recording = tmp_path / "run.ndjson"
    result = run(
        "--store", str(tmp_path / "s.db"), "--record", str(recording), "-m", "one", "-m", "two",
        "--", *CRASHY, "--crash-once-file", str(tmp_path / "crashed"),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    sent = [line["msg"] for line in recorded(recording) if line["dir"] == "bridge->agent"]
    assert [m.get("method") for m in sent].count("initialize") == 2


def test_a_link_or_a_fifo_is_refused_with_one_line_and_nothing_runs(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("precious\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, reason in ((link, "it is a symbolic link"), (fifo, "it is a FIFO (named pipe)")):
        result = run(
            "--store", str(tmp_path / "s.db"), "--record", str(path), "-m", "hi",
            "--", *ECHO, "--quiet",
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert f"acp-bridge: cannot record to {path}: {reason}" in result.stderr
        assert result.stdout == ""
    assert target.read_text() == "precious\n"
