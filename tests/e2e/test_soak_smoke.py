"""``scripts/soak.py --minutes 0.2``: the soak runs end to end, exits 0, prints its invariants.

The soak drives real ``acp-bridge run`` and ``proxy`` processes and a library loop against the
fixture agents (see the script's docstring); this is its short form, under 30 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INVARIANTS = (
    "every message in exactly one final state",
    "no message prompted twice unasked",
    "no orphan processes",
    "no leaked file descriptors",
    "bridge RSS flat, floods included",
)


# 12 s of soak, then its checks and teardown: 25 s on a loaded machine, and the run's own
# bound is 120 s.
@pytest.mark.timeout(180)
def test_a_short_soak_exits_0_and_prints_every_invariant(tmp_path: Path) -> None:
    raw = tmp_path / "soak.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "soak.py"), "--minutes", "0.2", "--seed", "7",
         "--json", str(raw)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    for name in INVARIANTS:
        assert f"[ok] {name}:" in result.stdout, result.stdout
    counts = json.loads(raw.read_text())
    assert counts["counts"]["bridge runs"] > 0
    assert counts["library"]["rounds"] > 0
    assert counts["proxy_fds"], "the proxy was never sampled"
    # Nothing of the soak is left: its temporary directory is gone.
    assert "acp-bridge-soak-" in result.stderr
    workdir = result.stderr.split(" in ", 1)[1].split()[0]
    assert not Path(workdir).exists()
