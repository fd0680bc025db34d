"""Starting fixtures/hosts/fake_host.py (a stdlib fake conversation host) for the verbs' tests.

The fake host prints ``ready <pid>`` once its socket listens: the tests wait for that line, never
for a time. Sockets live in a short private directory of their own (a Unix socket path holds
at most 107 bytes, and pytest's tmp_path can be longer).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FAKE_HOST = ROOT / "fixtures" / "hosts" / "fake_host.py"
AGENTS = ROOT / "fixtures" / "agents"
ECHO = [sys.executable, "-u", str(AGENTS / "echo_agent.py")]
ENV = {
    **{k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"},
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


@dataclass
class FakeHost:
    socket: Path
    log: Path
    process: subprocess.Popen[str]

    def received(self) -> list[dict[str, Any]]:
        """Every message the host received so far, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def methods(self) -> list[str]:
        return [m["method"] for m in self.received() if "method" in m]


@contextmanager
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="acpv-", dir="/tmp"))
    path.chmod(0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def fake_host(directory: Path, *flags: str, store: Path | None = None) -> Iterator[FakeHost]:
    """A running fake host on ``directory/host.sock``; ``flags`` go to fake_host.py."""
    socket = directory / "host.sock"
    log = directory / "host.log"
    argv = [sys.executable, "-u", str(FAKE_HOST), "--socket", str(socket), "--log", str(log)]
    if store is not None:
        argv += ["--store", str(store)]
    process = subprocess.Popen(
        [*argv, *flags], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready.startswith("ready"), ready
        yield FakeHost(socket, log, process)
    finally:
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def verb(
    *args: str, timeout: float = 60, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m acp_bridge ARGS`` (this checkout), captured."""
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=timeout,
    )


def make_store(directory: Path, conversation_id: str = "c-fake") -> Path:
    """A store at ``directory/s.db`` holding one conversation (the echo agent's, in ROOT)."""
    from acp_bridge.conversation.store import QueueStore

    path = directory / "s.db"
    with QueueStore.open(path) as store:
        store.create_conversation(
            conversation_id, agent={"argv": ECHO}, cwd=str(ROOT), config={}, now=1.0
        )
    return path


@contextmanager
def owning(store: Path, conversation_id: str, socket: Path | None) -> Iterator[None]:
    """This process owns the conversation (its lock held), as a run or chat would, serving
    its endpoint on ``socket`` (None: serving none, as an older owner)."""
    from acp_bridge.host.owner import ConversationOwner

    owner = ConversationOwner(store, conversation_id)
    owner.acquire()
    try:
        owner.set_socket(socket)
        yield
    finally:
        owner.release()
