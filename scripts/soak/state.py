"""The shared state of one soak: where its files live, its deadline, its ledger, its live
processes. Every part of the soak (runs, editor, probes, the main loop) works on one
:class:`Soak`; it sits below them all, so none of them imports another.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from scripts.common import ROOT
from scripts.soak.checks import Ledger, Verdict

TAG_VAR = "ACP_BRIDGE_SOAK_TAG"
"""Set in the environment of every process the soak starts, so survivors can be found."""


class Soak:
    """Shared state of one soak: where things live, the deadline, the ledger, live processes."""

    def __init__(self, minutes: float, seed: int, workers: int) -> None:
        self.seed = seed
        self.probe: Verdict | None = None
        self.workers = workers
        self.workdir = Path(tempfile.mkdtemp(prefix="acp-bridge-soak-"))
        self.store = self.workdir / "store.db"
        self.prompt_log = self.workdir / "prompts.log"
        self.soak_agent = ROOT / "fixtures" / "soak" / "soak_agent.py"
        self.tag_value = uuid.uuid4().hex
        self.env = {**os.environ, TAG_VAR: self.tag_value, "PYTHONPATH": str(ROOT)}
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.started = time.monotonic()
        self.deadline = self.started + minutes * 60
        self.ledger = Ledger()
        self.live: set[asyncio.subprocess.Process] = set()
        self.interrupted = False
        self._tags = 0

    def over(self) -> bool:
        return self.interrupted or time.monotonic() >= self.deadline

    def tag(self, letter: str) -> str:
        self._tags += 1
        return f"{letter}{self._tags}Z"

    def run_argv(self, args: list[str]) -> list[str]:
        return [sys.executable, "-m", "acp_bridge", "run", "--json", "--store", str(self.store),
                "--grace", "1", "--startup-timeout", "30", *args]  # fmt: skip

    def progress(self, text: str) -> None:
        print(f"soak {time.monotonic() - self.started:6.0f}s  {text}", file=sys.stderr, flush=True)
