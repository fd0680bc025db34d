"""``run --durability``, through the real ``acp-bridge``: what a commit survives.

``process`` (the default) keeps SQLite's WAL with ``synchronous=NORMAL``: a commit is handed to
the operating system, enough for a crash or ``kill -9`` of the bridge (test_store's SIGKILL test
holds for it), so no commit waits for the disk. ``power`` fsyncs every commit. The difference is
only visible in the system calls, so the fsync count is read with strace where it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acp_bridge.conversation.store import QueueStore

ROOT = Path(__file__).resolve().parents[2]
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
MESSAGES = ("-m", "one", "-m", "two", "-m", "three")


def run(*prefix: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "acp_bridge", "run", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=120,
    )


@pytest.mark.parametrize("durability", ["process", "power"])
def test_every_durability_runs_the_queue_and_stores_it(tmp_path: Path, durability: str) -> None:
    store = tmp_path / "store.db"
    result = run(args=["--durability", durability, "--store", str(store), *MESSAGES, "--", *ECHO])
    assert result.returncode == 0, result.stderr
    with QueueStore.open(store) as opened:
        latest = opened.latest_conversation()
        assert latest is not None
        assert [m.state.value for m in opened.messages(latest.id)] == ["done"] * 3


def test_an_unknown_durability_is_a_usage_error(tmp_path: Path) -> None:
    result = run(args=["--durability", "disk", "--store", str(tmp_path / "s.db"), "--", *ECHO])
    assert result.returncode == 2
    assert "--durability" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_only_power_waits_for_the_disk_at_each_commit(tmp_path: Path) -> None:
    """The bridge's fsyncs, per durability. Both pay a fixed few (creating the store, the
    owner's lock file, the checkpoint when the store closes); power adds one per commit."""
    counts = {}
    for durability in ("process", "power"):
        trace = tmp_path / f"{durability}.trace"
        store = tmp_path / f"{durability}.db"
        result = run(
            "strace", "-f", "-e", "trace=fsync,fdatasync", "-o", str(trace),
            args=["--durability", durability, "--store", str(store), *MESSAGES, "--", *ECHO],
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        counts[durability] = len(re.findall(r"\bf(?:data)?sync\(", trace.read_text()))
    # Three messages make at least six commits (each send; each final state with the next
    # start), each fsynced under power only.
    assert counts["power"] >= counts["process"] + 6


def test_runs_sharing_a_store_commit_around_each_other(tmp_path: Path) -> None:
    """A commit runs on the bridge's event loop only when nothing would make it wait; while
    another process writes, it waits in a worker thread instead. Three runs draining 150
    messages each into one new store at once: all exit 0, every message is done, and the last
    close leaves no WAL behind (the background checkpoints and the final one kept up)."""
    store = tmp_path / "shared.db"
    lines = "".join(f"msg {n}\n" for n in range(150))
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "acp_bridge", "run", "--store", str(store), "--", *ECHO],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=ENV,
        )
        for _ in range(3)
    ]
    outcomes = [process.communicate(lines, timeout=120) for process in runs]
    assert [process.returncode for process in runs] == [0, 0, 0], [err for _, err in outcomes]
    with QueueStore.open(store) as opened:
        conversations = opened.list_conversations()
        assert len(conversations) == 3
        for conversation in conversations:
            states = [m.state.value for m in opened.messages(conversation.id)]
            assert states == ["done"] * 150
    assert not (tmp_path / "shared.db-wal").exists()
