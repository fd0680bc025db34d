"""``acp-bridge chat`` on a terminal that goes away (issue 21, item 7), through the real process.

``tmux kill-session``, or closing the window: the pty's other side closes, the kernel sends
SIGHUP to the session, and every later write to the terminal fails with EIO. Before the fix the
first such write (the screen's last line, say) ended ``chat`` in a traceback and exit 1. Now an
output that cannot be written is a hangup: the running turn is recorded ``cancelled``, the
agent's tree is stopped, and the exit code is 130.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import socket
import sqlite3
import struct
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLOW = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "slow_agent.py"), "--quiet"]


def read_until(master: int, wanted: bytes, seen: bytearray, timeout: float = 60) -> None:
    """Read what the terminal shows until ``wanted`` appears (a deadline, not a sleep)."""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{wanted!r} never showed; the screen: {bytes(seen[-500:])!r}"
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            seen += os.read(master, 65536)


def test_chat_on_a_terminal_that_goes_away_records_the_turn_and_exits_130(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.db"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    port = str(listener.getsockname()[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "TERM": "xterm",
    }
    command = [
        sys.executable, "-m", "acp_bridge", "chat", "--store", str(store), "--",
        *SLOW, "--steps", "echo working; trickle 100000 20; wait", "--connect-back", port,
    ]  # fmt: skip
    pid, master = pty.fork()  # the pty is the child's controlling terminal, as in tmux
    if pid == 0:  # the child: nothing of the test runs here
        # A terminal of 24 x 120, as a tmux window has: at pty.fork's 0 x 0 the partial line
        # showed as an ellipsis until 4 KiB of it had streamed (6 s of this turn).
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
        os.chdir(tmp_path)
        os.execvpe(command[0], command, env)
    try:
        peer = listener.accept()[0]
        seen = bytearray()
        read_until(master, b"Ctrl-D leaves", seen)
        os.write(master, b"hello\r")
        read_until(master, b"trickle-1-2", seen)  # the turn streams to the terminal
        os.close(master)  # the session is killed: SIGHUP, then EIO on every write
        master = -1
        _, status = os.waitpid(pid, 0)
        pid = 0
        peer.settimeout(30)
        with peer:  # the agent's socket closes when it dies
            while peer.recv(4096):
                pass
    finally:
        if master >= 0:
            os.close(master)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            os.waitpid(pid, 0)
        listener.close()
    assert os.waitstatus_to_exitcode(status) == 130
    with contextlib.closing(sqlite3.connect(store)) as db:
        rows = db.execute("SELECT seq, state FROM messages ORDER BY seq").fetchall()
    assert rows == [(1, "cancelled")]
