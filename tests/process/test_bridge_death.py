"""However the bridge process ends, no agent process outlives it (connect-back proof)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import sniffio

from tests.process.liveness import open_liveness

pytestmark = pytest.mark.anyio

HOST = Path(__file__).with_name("bridge_host.py")
ROOT = Path(__file__).resolve().parents[2]


async def _run_host(signum: signal.Signals) -> int:
    """The bridge host runs on the test's backend: each backend's signal handling is tried."""
    async with open_liveness() as liveness:
        process = await anyio.open_process(
            [sys.executable, "-u", str(HOST), str(liveness.port), sniffio.current_async_library()],
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
        async with process:
            assert process.stdout is not None
            peers = await liveness.accept(2)
            assert {p.role for p in peers} == {"agent", "grandchild"}
            with anyio.fail_after(20):
                assert (await process.stdout.receive()).startswith(b"ready")
            process.send_signal(signum)
            with anyio.fail_after(30):
                returncode = await process.wait()
        await liveness.assert_closed(*peers)
    return returncode


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signalled_bridge_takes_the_whole_agent_tree_with_it(
    signum: signal.Signals,
) -> None:
    assert await _run_host(signum) == 0


async def test_a_bridge_that_fails_with_an_exception_leaves_no_agent_behind() -> None:
    assert await _run_host(signal.SIGUSR1) == 1


def test_a_bridge_killed_outright_takes_a_stubborn_agent_with_it(tmp_path: Path) -> None:
    """SIGKILL leaves the bridge no chance to stop anything. The agent, in its own session,
    used to live on: a stubborn one that ignores stdin's end never noticed (found by the soak).
    It is started with a parent-death signal (setpriv --pdeathsig KILL) where Linux has it."""
    import os
    import shutil
    import socket

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed: no parent-death signal here")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    stubborn = ROOT / "fixtures" / "agents" / "stubborn_agent.py"
    bridge = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--store", str(tmp_path / "s.db"),
         "-m", "hang", "--", sys.executable, "-u", str(stubborn), "--linger", "--quiet",
         "--connect-back", str(listener.getsockname()[1])],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    agent = None
    try:
        agent, _ = listener.accept()
        agent.settimeout(30)
        bridge.send_signal(signal.SIGKILL)
        bridge.wait(timeout=30)
        while agent.recv(4096):  # the agent's end closes when it dies
            pass
    finally:
        bridge.kill()
        if agent is not None:
            agent.close()
        listener.close()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_an_agent_spawned_on_trio_outlives_the_worker_thread_that_forked_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent-death signal fires when the *thread* that forked ends. trio forks in a
    worker thread that retires after 10 s idle: every trio agent was SIGKILLed a few seconds
    in (found by the soak). Here the workers retire at once, and the agent must live on."""
    import threading

    from trio._core import _thread_cache

    from acp_bridge.client.options import ClientOptions
    from acp_bridge.client.supervisor import open_supervised_agent
    from acp_bridge.process.spec import AgentSpec

    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.01)
    forkers: list[threading.Thread] = []
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def recording(self: subprocess.Popen[bytes], *args: object, **kwargs: object) -> object:
        forkers.append(threading.current_thread())
        return execute_child(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", recording)
    echo = ROOT / "fixtures" / "agents" / "echo_agent.py"
    spec = AgentSpec([sys.executable, "-u", str(echo), "--quiet"], name="echo")
    async with open_supervised_agent(spec, ClientOptions()) as agent:
        (forker,) = forkers
        assert forker is not threading.main_thread()  # trio forked in a worker thread
        with anyio.fail_after(20):  # that thread retires (idle): the kernel's cue
            # Polled: joining it through anyio.to_thread could hand the join to trio's idle
            # worker, which may be that very thread ("cannot join current thread"), and a
            # worker kept busy never retires.
            while forker.is_alive():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        session = await agent.new_session(tmp_path)
        assert (await session.run("hello")).stop_reason == "end_turn"
        assert agent.generation == 1
