"""``acp-bridge demo`` end to end: the real command, run from a directory outside the
repository (no fixtures to lean on), offline, on the built-in agent. It pays two agent starts
(litellm's import each time: the demo crashes the agent on purpose)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.agent_client import ROOT, requires_litellm

pytestmark = [requires_litellm, pytest.mark.timeout(180)]


def test_demo_runs_offline_from_anywhere_and_every_step_behaves(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)  # the checkout under test, not whatever is installed
    env["TMPDIR"] = str(scratch)
    env["XDG_STATE_HOME"] = str(tmp_path / "state")  # nothing may be written there
    for key in [k for k in env if k.endswith("_API_KEY")]:
        del env[key]
    result = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    lines = result.stderr.splitlines()
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    steps = [line for line in lines if re.match(r"acp-bridge demo: [1-6]/6 ", line)]
    assert [s.split()[2] for s in steps] == [f"{n}/6" for n in range(1, 7)]
    narration = "\n".join(steps)
    for expected in (
        "streamed answer",
        "asked permission, the demo chose allow_once",
        "was queued while message",
        "the turn ended cancelled",
        "exited with status 70",
        "came back through session/load",
        "usage:",
    ):
        assert expected in narration, expected
    assert lines[-1].startswith("acp-bridge demo: all 6 steps behaved")
    assert "still here, in the same session" in result.stdout  # the restored conversation
    assert list(scratch.iterdir()) == []  # its temporary directories are gone
    assert not (tmp_path / "state").exists()
