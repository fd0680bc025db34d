"""Full disks, dead terminals and signals (issue 21, items 6-10), through the real ``run``.

Each was reproduced before the fix:

6. ``run`` on a full disk (here: a file size limit, RLIMIT_FSIZE, with SIGXFSZ ignored, so
   SQLite's writes fail with EFBIG) waited out the whole stop window and named the wrong thing.
7. An output error other than a closed pipe (``run > /dev/full``: ENOSPC; a terminal that
   closed: EIO) ended ``run`` in a traceback and exit 1.
8. A signal in the first milliseconds of ``run`` killed it by the signal, not exit 130.
9. SIGTERM while the agent was being restored recorded the message waiting for the restart
   ``cancelled``, though it was never sent.
10. SIGINT while the agent was still starting took 2 s, and said "the running turn was
    cancelled" when no turn ran.
"""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
SLOW = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "slow_agent.py"), "--quiet"]
RUN = [sys.executable, "-m", "acp_bridge", "run"]


def stored_rows(store: Path) -> list[tuple[int, str]]:
    with contextlib.closing(sqlite3.connect(store)) as db:
        return db.execute("SELECT seq, state FROM messages ORDER BY seq").fetchall()


@contextlib.contextmanager
def agent_listener() -> Iterator[tuple[socket.socket, list[str]]]:
    """A socket the agent connects back to (``--connect-back PORT``): it closes when the agent
    dies, so a test can wait for the agent's end without polling."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    try:
        yield listener, ["--connect-back", str(listener.getsockname()[1])]
    finally:
        listener.close()


def wait_agent_gone(peer: socket.socket) -> None:
    peer.settimeout(30)
    with peer:
        while peer.recv(4096):
            pass


# -- 7. output errors other than a closed pipe ---------------------------------------------------


def test_run_into_a_full_device_stops_like_a_signal_and_exits_130(tmp_path: Path) -> None:
    """``run > /dev/full``: the first text the agent streams cannot be written (ENOSPC)."""
    store = tmp_path / "s.db"
    with agent_listener() as (listener, connect_back), open("/dev/full", "w") as full:
        bridge = subprocess.Popen(
            [*RUN, "--store", str(store), "-m", "echo working; trickle 100000 20; wait",
             "--", *SLOW, *connect_back],
            stdin=subprocess.DEVNULL, stdout=full, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, env=ENV,
        )  # fmt: skip
        try:
            peer = listener.accept()[0]
            _out, err = bridge.communicate(timeout=60)
        finally:
            bridge.kill()
        wait_agent_gone(peer)
    assert bridge.returncode == 130, err
    assert "Traceback" not in err, err
    assert "stdout could not be written (No space left on device)" in err, err
    assert stored_rows(store) == [(1, "cancelled")]


def test_run_on_a_terminal_that_closes_stops_like_a_hangup_and_exits_130(tmp_path: Path) -> None:
    """stdout and stderr on a pty whose other side closes mid-turn: every write then fails
    with EIO (the pty is not the bridge's controlling terminal, so no SIGHUP comes)."""
    store = tmp_path / "s.db"
    master, slave = pty.openpty()
    with agent_listener() as (listener, connect_back):
        bridge = subprocess.Popen(
            [*RUN, "--store", str(store), "-m", "echo working; trickle 100000 20; wait",
             "--", *SLOW, *connect_back],
            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=tmp_path, env=ENV,
        )  # fmt: skip
        os.close(slave)
        try:
            peer = listener.accept()[0]
            seen = b""
            while b"trickle-1-0" not in seen:  # the turn is streaming to the terminal
                seen += os.read(master, 4096)
            os.close(master)
            code = bridge.wait(timeout=60)
        finally:
            bridge.kill()
        wait_agent_gone(peer)
    assert code == 130
    assert stored_rows(store) == [(1, "cancelled")]
