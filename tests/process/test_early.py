"""An agent spawned before the bridge finished importing, then adopted (process/early.py):
supervised exactly like one the launcher spawned, on both backends, and never left behind when
nobody adopts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.errors import AgentExitedError, ConnectionClosedError
from acp_bridge.process.early import AdoptedProcess, discard, spawn_early
from acp_bridge.process.launcher import open_agent
from tests.process.liveness import open_liveness
from tests.process.test_launcher import QUICK, fake, initialize

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_an_adopted_agent_serves_and_leaves_no_process() -> None:
    async with open_liveness() as liveness:
        spec = fake("forking_agent.py", "--connect-back", str(liveness.port))
        popen = spawn_early(spec)
        async with open_agent(spec, shutdown=QUICK, process=AdoptedProcess(popen)) as agent:
            peers = await liveness.accept(2)
            assert agent.pid == popen.pid
            assert (await initialize(agent))["protocolVersion"] == 1
        await liveness.assert_closed(*peers)
        assert agent.has_exited
        assert popen.returncode is not None  # reaped, not a zombie


async def test_the_exit_of_an_adopted_agent_is_noticed_with_its_status() -> None:
    spec = fake("echo_agent.py", "--crash-on", "initialize", "--exit-code", "7")
    adopted = AdoptedProcess(spawn_early(spec))
    async with open_agent(spec, shutdown=QUICK, process=adopted) as agent:
        refused = False
        try:
            await initialize(agent)
        except* ConnectionClosedError:
            refused = True
        assert refused
        with anyio.fail_after(10):
            status = await agent.wait_exited()
        assert status.returncode == 7


async def test_generation_one_is_adopted_and_a_restart_spawns_anew(tmp_path: Path) -> None:
    spec = fake(
        "echo_agent.py", "--prompt-words", "--crash-once-file", str(tmp_path / "crashed"),
        "--history", str(tmp_path / "history.json"),
    )  # fmt: skip
    popen = spawn_early(spec)
    options = ClientOptions()
    async with open_supervised_agent(spec, options, started=AdoptedProcess(popen)) as agent:
        session = await agent.new_session(tmp_path)
        first_pid = agent.pid
        assert first_pid == popen.pid
        with pytest.raises(AgentExitedError) as crashed:
            await session.run("echo one; crash KILL")
        assert crashed.value.recoverable
        response = await session.run("echo two")
        assert response.stop_reason == "end_turn"
        assert agent.pid not in (None, first_pid)
    assert popen.returncode == -signal.SIGKILL


def test_discard_kills_the_whole_group_of_an_agent_never_adopted() -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    spec = fake("forking_agent.py", "--connect-back", str(listener.getsockname()[1]))
    popen = spawn_early(spec)
    peers = [listener.accept()[0] for _ in range(2)]  # the agent and its grandchild
    try:
        discard(popen)
        assert popen.returncode == -signal.SIGKILL
        for peer in peers:
            peer.settimeout(20)
            while peer.recv(4096):  # closes when the process dies
                pass
    finally:
        for peer in peers:
            peer.close()
        listener.close()


def test_run_kills_its_early_agent_when_the_store_cannot_be_opened(tmp_path: Path) -> None:
    """The agent of a new conversation is spawned before the store is opened (spawn first);
    a run that then fails must not leave it behind. Under load the run may stop the agent
    before it connected back: what counts is that no process of it is left (found by a
    marker in its command line), and that one that did connect sees its end."""
    import socket

    import psutil

    listener = socket.create_server(("127.0.0.1", 0))
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    marker = str(tmp_path / "early-agent-history.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        bridge = subprocess.run(
            [sys.executable, "-m", "acp_bridge", "run", "--store", str(blocker / "s.db"),
             "-m", "hi", "--", *fake("echo_agent.py", "--history", marker).argv,
             "--connect-back", str(listener.getsockname()[1])],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
        )  # fmt: skip
        assert bridge.returncode == 2
        assert "cannot open the store" in bridge.stderr

        def left() -> list[psutil.Process]:
            found = []
            for process in psutil.process_iter(["cmdline", "status"]):
                cmdline = process.info["cmdline"] or []
                if marker in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(process)
            return found

        _gone, alive = psutil.wait_procs(left(), timeout=10)  # at once: the bridge waited
        assert not alive, alive
        listener.setblocking(False)
        try:
            agent = listener.accept()[0]  # it connected back before it was stopped
        except BlockingIOError:
            return
        agent.settimeout(20)
        while agent.recv(4096):  # ...and is gone
            pass
        agent.close()
    finally:
        listener.close()


def test_sigterm_while_the_bridge_still_starts_stops_the_early_agent(tmp_path: Path) -> None:
    """The agent is spawned before the bridge has imported itself; the signal arrives as soon
    as the agent is up, while the bridge is (almost always) still importing. Before, SIGTERM
    or SIGHUP in that window killed the bridge by the default action (exit 143, nothing said)
    and orphaned the agent."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    stubborn = fake("stubborn_agent.py", "--linger", "--ignore-sigterm", "--quiet").argv
    bridge = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--store", str(tmp_path / "s.db"),
         "-m", "hang", "--", *stubborn, "--connect-back", str(listener.getsockname()[1])],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    agent = None
    try:
        agent, _ = listener.accept()
        bridge.send_signal(signal.SIGTERM)
        _, err = bridge.communicate(timeout=30)
        assert bridge.returncode == 130, err
        assert b"Traceback" not in err
        agent.settimeout(30)
        while agent.recv(4096):  # closes when the agent dies
            pass
    finally:
        bridge.kill()
        bridge.communicate(timeout=30)  # reaped, its pipe closed, even when the test failed
        if agent is not None:
            agent.close()
        listener.close()


SWALLOWED_SIGNAL = """
import os, signal, sys, weakref
from acp_bridge.cli import run_entry
from acp_bridge.cli.main import main

def import_with_a_swallowed_signal():
    # SIGTERM lands while a weakref callback runs (as an import lock's callback can during the
    # real import): the handler's KeyboardInterrupt is printed by CPython and dropped.
    class Box:
        pass
    def callback(_ref):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100_000):
            pass
    box = Box()
    ref = weakref.ref(box, callback)
    del box
    def run_resolved(*args):
        print("run_resolved was called", flush=True)
        return 0
    return run_resolved

run_entry._import_run = import_with_a_swallowed_signal
code = main(["run", "--store", sys.argv[1], "-m", "hi", "--", *sys.argv[2:]])
print("exit", code, flush=True)
sys.exit(code)
"""


def test_a_signal_during_the_import_stops_the_run_once_it_is_over(tmp_path: Path) -> None:
    """A signal during the import, even while a callback runs whose exceptions CPython only
    prints: it happened in CI, and the run then went on (prompting a stubborn agent) and hung;
    raised elsewhere in an import, its KeyboardInterrupt surfaced as a RuntimeError. The
    import now holds the signals: the one that came is acted upon once the import is over,
    with exit 130 before prompting, and the spawned-first agent is discarded."""
    agent = fake("echo_agent.py").argv
    result = subprocess.run(
        [sys.executable, "-c", SWALLOWED_SIGNAL, str(tmp_path / "s.db"), *agent],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert "KeyboardInterrupt" not in result.stderr  # held: nothing raised, nothing printed
    assert "Traceback" not in result.stderr
    assert "interrupted" in result.stderr
    assert "run_resolved was called" not in result.stdout
    assert result.returncode == 130, (result.stdout, result.stderr)



SIGNAL_INSIDE_POPEN = """
import os, signal, subprocess, sys
from acp_bridge.cli.main import main
from acp_bridge.process import parent_death

# As on a machine without setpriv, where no kernel signal stops an agent whose parent is gone.
parent_death._setpriv = lambda: None
original = subprocess.Popen._execute_child

def execute_child(self, *args, **kwargs):
    original(self, *args, **kwargs)
    print("agent pid", self.pid, flush=True)
    # SIGTERM lands after the fork, before Popen has handed the process to anyone.
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):
        pass

subprocess.Popen._execute_child = execute_child
sys.exit(main(["run", "--store", sys.argv[1], "-m", "hang", "--", *sys.argv[2:]]))
"""


def test_a_signal_while_popen_still_runs_stops_the_early_agent(tmp_path: Path) -> None:
    """The soak's start-up probe: a signal as soon as the agent process exists. Raised inside
    ``Popen`` (after the fork, before it returned), the interrupt left an agent nobody held:
    the run exited 130 and the agent lived on. The spawn now holds the signal back until the
    process has its holder, which stops it on the way out."""
    import psutil

    stubborn = fake("stubborn_agent.py", "--linger", "--ignore-sigterm", "--quiet").argv
    result = subprocess.run(
        [sys.executable, "-c", SIGNAL_INSIDE_POPEN, str(tmp_path / "s.db"), *stubborn],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    pid = int(result.stdout.split("agent pid ")[1].split()[0])
    try:
        agent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        agent = None  # stopped and reaped by the bridge
    survivors = []
    if agent is not None:
        _, survivors = psutil.wait_procs([agent], timeout=5)  # an orphan's reaper may lag
        for survivor in survivors:
            survivor.kill()
    assert survivors == [], "the agent outlived the bridge"
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr
