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
import json
import os
import pty
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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


def reap(bridge: subprocess.Popen[bytes]) -> None:
    """Kill and reap the bridge, its pipes closed: a no-op once it exited, and after a failed
    or timed-out test no running Popen is left for its warning to fail a later test."""
    bridge.kill()
    bridge.communicate(timeout=30)


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
    with peer, contextlib.suppress(ConnectionResetError):  # reset: killed, unread data
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
            reap(bridge)
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
            reap(bridge)
        wait_agent_gone(peer)
    assert code == 130
    assert stored_rows(store) == [(1, "cancelled")]


# -- 8. a signal in the first milliseconds ---------------------------------------------------------

SIGNAL_AT_THE_FIRST_LINE = """
import os, signal, sys
from acp_bridge.cli import launch

signum = int(sys.argv[1])
def hold_then_signal(argv):
    held(argv)
    os.kill(os.getpid(), signum)  # before the command line is even imported
held, launch.hold_if_run = launch.hold_if_run, hold_then_signal
sys.argv = ["acp-bridge", "run", *sys.argv[2:]]
launch.entry()
"""

STOPPING = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.mark.parametrize("signum", STOPPING, ids=lambda s: s.name)
def test_a_signal_at_the_bridges_first_line_exits_130(tmp_path: Path, signum: int) -> None:
    """The program's first line holds the stopping signals: one that comes while the command
    line is still being imported ends the run with 130, before any agent is spawned."""
    store = tmp_path / "s.db"
    result = subprocess.run(
        [sys.executable, "-c", SIGNAL_AT_THE_FIRST_LINE, str(int(signum)),
         "--store", str(store), "-m", "hi", "--", *SLOW],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env=ENV,
    )  # fmt: skip
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not store.exists()  # stopped before anything was opened


def caught_signals(pid: int) -> int:
    """The mask of the signals ``pid`` has a handler for (``SigCgt``); 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(status.split("SigCgt:")[1].split()[0], 16)


def wait_until_held(bridge: subprocess.Popen[bytes]) -> None:
    """Wait until the bridge's own code holds SIGTERM and SIGHUP (the interpreter's start-up,
    before that, is not the bridge's)."""
    wanted = (1 << (signal.SIGTERM - 1)) | (1 << (signal.SIGHUP - 1))
    while caught_signals(bridge.pid) & wanted != wanted:
        assert bridge.poll() is None, "the bridge ended before it held its signals"
        time.sleep(0.0005)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_signal_at_any_moment_of_the_start_exits_130(tmp_path: Path) -> None:
    """Each stopping signal, sent at a spread of moments from the bridge's first line through
    its whole start (imports, the early spawn, the library's import, the event loop's start,
    the first turn): every run exits 130, without a traceback, and leaves no agent behind.
    Which phase a given delay hits depends on the machine; every phase must give 130."""
    failures = []
    for step in range(12):
        signum = STOPPING[step % 3]
        with agent_listener() as (listener, connect_back):
            listener.settimeout(0.001)
            bridge = subprocess.Popen(
                [*RUN, "--store", str(tmp_path / f"s{step}.db"), "-m", "echo hi; wait",
                 "--", *SLOW, *connect_back],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                cwd=tmp_path, env=ENV,
            )  # fmt: skip
            try:
                wait_until_held(bridge)
                time.sleep(step * 0.012)  # the moment, not a wait for anything
                bridge.send_signal(signum)
                _out, err = bridge.communicate(timeout=60)
            finally:
                reap(bridge)
            with contextlib.suppress(TimeoutError):  # spawned, so the agent must be gone
                wait_agent_gone(listener.accept()[0])
        text = err.decode(errors="replace")
        if bridge.returncode != 130 or "Traceback" in text:
            failures.append((step, signum.name, bridge.returncode, text[-500:]))
    assert failures == []


def test_sigint_inherited_as_ignored_stays_ignored(tmp_path: Path) -> None:
    """A background job (``acp-bridge run ... &`` in a script) inherits SIGINT ignored, so a
    Ctrl-C meant for the foreground does not stop it. The bridge keeps it ignored: the SIGINT
    here is not a first stop, so the SIGTERM after it is (a second one would kill at once)."""
    store = tmp_path / "s.db"
    bridge = subprocess.Popen(
        [*RUN, "--json", "--store", str(store), "-m", "echo working; wait", "--", *SLOW],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tmp_path, env=ENV,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        assert bridge.stdout is not None
        for line in bridge.stdout:
            if json.loads(line)["event"] == "update":  # the turn runs
                break
        assert caught_signals(bridge.pid) & (1 << (signal.SIGINT - 1)) == 0
        bridge.send_signal(signal.SIGINT)
        bridge.send_signal(signal.SIGTERM)
        _out, err = bridge.communicate(timeout=60)
    finally:
        reap(bridge)
    assert bridge.returncode == 130, err
    assert "the running turn was cancelled and the agent was stopped" in err, err
    assert stored_rows(store) == [(1, "cancelled")]


# -- 10. SIGINT while the agent is still starting --------------------------------------------------


@pytest.mark.parametrize("moment", ["spawned", "supervised"])
def test_sigint_while_the_agent_starts_stops_it_at_once_and_says_so(
    tmp_path: Path, moment: str
) -> None:
    """The agent has connected back but sleeps before it reads its stdin (it has not answered
    ``initialize``). Before the fix the stop closed its stdin and waited 2 s for an exit that
    could not come, then said "the running turn was cancelled" though no turn ran. Now it is
    sent SIGTERM at once (no EOF wait, which ``-v`` would log) and the line says what was
    stopped. ``spawned``: as soon as the agent runs (the bridge may still be importing);
    ``supervised``: once the bridge forwards the agent's stderr (its own watcher is in
    charge)."""
    store = tmp_path / "s.db"
    with agent_listener() as (listener, connect_back):
        bridge = subprocess.Popen(
            [*RUN, "-v", "--store", str(store), "-m", "echo hi", "--",
             *SLOW[:-1], "--startup-delay", "60", *connect_back],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, env=ENV,
        )  # fmt: skip
        try:
            peer = listener.accept()[0]  # the agent runs, and will not read stdin for 60 s
            seen = []
            if moment == "supervised":
                assert bridge.stderr is not None
                for line in bridge.stderr:
                    seen.append(line)
                    if "started:" in line:  # the agent's own log line, forwarded
                        break
            bridge.send_signal(signal.SIGINT)
            _out, err = bridge.communicate(timeout=60)
        finally:
            reap(bridge)
        wait_agent_gone(peer)
    err = "".join(seen) + err
    assert bridge.returncode == 130, err
    assert "did not exit on EOF" not in err, err
    assert "interrupted; the agent was still starting; it was stopped" in err, err
    assert "running turn" not in err, err


# -- 6. a full disk --------------------------------------------------------------------------------


def file_size_limit(limit: int) -> Callable[[], None]:
    """For ``preexec_fn``: no file may grow past ``limit`` bytes (a full disk, without root or
    a mount), and SIGXFSZ ignored so that the write fails with EFBIG instead of killing."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_message_a_full_disk_cannot_store_is_named_and_the_run_stops(tmp_path: Path) -> None:
    """The store is created, then the first message does not fit: the line names it, the
    agent is stopped, nothing is prompted, and the exit code is 4."""
    store = tmp_path / "s.db"
    message = "echo " + "x" * 300_000 + "\n"  # too long for an argument: a line of stdin
    with agent_listener() as (listener, connect_back):
        bridge = subprocess.Popen(
            [*RUN, "--json", "--store", str(store), "--", *SLOW, *connect_back],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, env=ENV, preexec_fn=file_size_limit(150_000),
        )  # fmt: skip
        try:
            peer = listener.accept()[0]
            out, err = bridge.communicate(message, timeout=60)
        finally:
            reap(bridge)
        wait_agent_gone(peer)
    assert bridge.returncode == 4, err
    assert "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert (
        line.startswith("acp-bridge: message 1 of this run ('echo xxxxxxxx")
        and "could not be stored" in line
    ), line
    assert '"turn_started"' not in out
    assert stored_rows(store) == []


def test_a_full_disk_mid_run_stops_at_once_and_reports_nothing_unstored(tmp_path: Path) -> None:
    """Lines keep coming on stdin while turns run, until a commit fails (a message's store, or
    a turn's end: which one depends on the order they meet). The run stops without waiting
    out the stop window (the turn's end can no longer be recorded), says what could not be
    stored in one line, stops the agent, and exits 4; no turn it reported ``done`` is missing
    from the store."""
    store = tmp_path / "s.db"
    lines = "".join(f"echo line {i} {'y' * 4000}\n" for i in range(400))
    with agent_listener() as (listener, connect_back):
        bridge = subprocess.Popen(
            [*RUN, "--json", "--store", str(store), "--", *SLOW, "--max-wait", "0",
             *connect_back],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, env=ENV, preexec_fn=file_size_limit(400_000),
        )  # fmt: skip
        try:
            peer = listener.accept()[0]
            with contextlib.suppress(BrokenPipeError):
                out, err = bridge.communicate(lines, timeout=60)
        finally:
            reap(bridge)
        wait_agent_gone(peer)
    assert bridge.returncode == 4, err
    assert "Traceback" not in err, err
    assert "did not close in time" not in err, err  # the stop window was not waited out
    (line,) = [x for x in err.splitlines() if "could not" in x]
    assert "disk I/O error" in line or "full" in line, line
    done = {
        event["seq"]
        for event in map(json.loads, out.splitlines())
        if event["event"] == "turn_ended" and event["state"] == "done"
    }
    assert done <= {seq for seq, state in stored_rows(store) if state == "done"}


# -- 9. SIGTERM while the agent is being restored ------------------------------------------------


def test_sigterm_during_a_restore_leaves_the_waiting_message_queued_for_resume(
    tmp_path: Path,
) -> None:
    """Message 1 crashes the agent; the restarted agent takes its time over ``session/load``
    while message 2 waits for it. SIGTERM then: message 2 was never sent, so it stays queued
    (it was recorded ``cancelled``), and ``--resume`` sends it."""
    store = tmp_path / "s.db"
    agent = [
        sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"),
        "--history", str(tmp_path / "history.json"), "--load-delay-ms", "60000",
    ]  # fmt: skip
    bridge = subprocess.Popen(
        [*RUN, "-v", "--json", "--store", str(store), "-m", "crash", "-m", "echo second",
         "--", *agent],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    try:
        assert bridge.stderr is not None
        seen = []
        for line in bridge.stderr:  # the agent's log, forwarded with -v
            seen.append(line)
            if "request session/load" in line:  # the restore is under way
                break
        bridge.send_signal(signal.SIGTERM)
        out, err = bridge.communicate(timeout=60)
    finally:
        reap(bridge)
    err = "".join(seen) + err
    assert bridge.returncode == 130, err
    assert "no turn was running; the agent was stopped" in err, err
    assert stored_rows(store) == [(1, "failed"), (2, "queued")]
    turns = [e for e in map(json.loads, out.splitlines()) if e["event"].startswith("turn_")]
    assert [e["seq"] for e in turns] == [1, 1], turns  # 2 never started

    (conversation,) = {e["conversation"] for e in map(json.loads, out.splitlines())
                       if e["event"] == "session"}  # fmt: skip
    quick = agent[:-2]  # the same agent, restoring at once this time
    resumed = subprocess.run(
        [*RUN, "--json", "--store", str(store), "--conversation", conversation, "--", *quick],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env=ENV,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert stored_rows(store) == [(1, "failed"), (2, "done")]


def test_run_whose_controlling_terminal_closes_stops_once_and_exits_130(tmp_path: Path) -> None:
    """As when the window closes: SIGHUP, and EIO on the writes. Both are one stop (the turn is
    recorded ``cancelled`` after its grace), not a first and a second."""
    store = tmp_path / "s.db"
    with agent_listener() as (listener, connect_back):
        command = [*RUN, "--store", str(store), "-m", "echo working; trickle 100000 20; wait",
                   "--", *SLOW, *connect_back]  # fmt: skip
        pid, master = pty.fork()  # the pty is the bridge's controlling terminal
        if pid == 0:  # the child: nothing of the test runs here
            os.chdir(tmp_path)
            os.execvpe(command[0], command, ENV)
        try:
            peer = listener.accept()[0]
            seen = b""
            while b"trickle-1-0" not in seen:  # the turn is streaming to the terminal
                seen += os.read(master, 4096)
            os.close(master)
            master = -1
            _, status = os.waitpid(pid, 0)
            pid = 0
        finally:
            if master >= 0:
                os.close(master)
            if pid:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        wait_agent_gone(peer)
    assert os.waitstatus_to_exitcode(status) == 130
    assert stored_rows(store) == [(1, "cancelled")]
