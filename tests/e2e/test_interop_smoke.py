"""``scripts/interop.py --quick`` end to end: the interop matrix's fast cells, whose peers are
already here (the official Python SDK, the stdlib fixture agent, our CLI and proxy, and the
TypeScript SDK when tests/interop/node has its packages). Nothing is installed or fetched; the
TypeScript cells are skipped, with the reason, where Node or node_modules is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / "tests" / "interop" / "node" / "node_modules" / "@agentclientprotocol"

pytestmark = pytest.mark.timeout(200)


def test_quick_interop_matrix_passes_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)  # the checkout under test, not whatever is installed
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    out = tmp_path / "interop.json"
    script = str(ROOT / "scripts" / "interop.py")
    result = subprocess.run(
        [sys.executable, script, "--quick", "--json", str(out), "--cache", str(tmp_path / "cache")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=190,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()  # --quick installs nothing
    results = json.loads(out.read_text())
    cells = {(c["agent"], c["path"]): c for c in results["cells"]}
    for key in [("fixture-echo", "cli"), ("fixture-echo", "py-sdk+proxy")]:
        assert cells[key]["status"] == "pass", cells[key]
        checks = {"initialize", "session/new", "stream", "cancel", "restart", "load"}
        assert set(cells[key]["checks"]) == checks
    sdk = cells[("python-sdk", "py-sdk+proxy")]
    assert sdk["status"] == "pass", sdk
    assert "load" in sdk["not_checked"]  # the SDK echo agent offers no session/load: said so
    ts = cells[("fixture-echo", "ts-sdk+proxy")]
    if shutil.which("node") and NODE_MODULES.exists():
        assert ts["status"] == "pass", ts
    else:
        assert ts["status"] == "skipped" and ts["reasons"]["skipped"], ts
    assert "pass" in result.stdout and "agent \\ client" in result.stdout  # the printed matrix
