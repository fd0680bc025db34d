"""open_agent() against real misbehaving processes: the tree dies, whatever way we leave."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest

from acp_bridge.errors import ConnectionClosedError, SpawnError
from acp_bridge.process.launcher import AgentProcess, ShutdownTimeouts, open_agent
from acp_bridge.process.spec import AgentSpec
from acp_bridge.rpc.peer import JsonRpcPeer
from tests.process.liveness import open_liveness

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
QUICK = ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5)


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), *flags])


async def initialize(agent: AgentProcess) -> dict[str, object]:
    peer = JsonRpcPeer(agent.stdout, agent.stdin, name=agent.spec.name)
    async with anyio.create_task_group() as tg:
        await tg.start(peer.run)
        with anyio.fail_after(20):
            result = await peer.request(
                "initialize", {"protocolVersion": 1, "clientCapabilities": {}}
            )
        await peer.aclose()
    assert isinstance(result, dict)
    return result


async def test_closing_the_agent_kills_its_grandchildren() -> None:
    async with open_liveness() as liveness:
        spec = fake("forking_agent.py", "--connect-back", str(liveness.port))
        async with open_agent(spec, shutdown=QUICK) as agent:
            peers = await liveness.accept(2)
            assert {p.role for p in peers} == {"agent", "grandchild"}
            assert agent.pid in {p.pid for p in peers}
        await liveness.assert_closed(*peers)
        assert agent.has_exited


async def test_the_exit_is_noticed_while_a_grandchild_holds_stdout() -> None:
    async with open_liveness() as liveness:
        spec = fake("forking_agent.py", "--connect-back", str(liveness.port), "--orphan-exit")
        async with open_agent(spec, shutdown=QUICK) as agent:
            peers = await liveness.accept(2)
            with anyio.fail_after(10):
                status = await agent.wait_exited()
            assert status.returncode == 0
            grandchild = next(p for p in peers if p.role == "grandchild")
            # The grandchild still holds the pipes, so the agent's death is not an EOF...
            assert grandchild.pid != agent.pid
        # ...and closing still kills what it left behind in the group.
        await liveness.assert_closed(grandchild)


async def test_a_grandchild_that_left_the_group_is_still_killed() -> None:
    async with open_liveness() as liveness:
        spec = fake("forking_agent.py", "--connect-back", str(liveness.port), "--setsid-grandchild")
        async with open_agent(spec, shutdown=QUICK):
            peers = await liveness.accept(2)
        await liveness.assert_closed(*peers)


async def test_an_agent_that_ignores_sigterm_is_killed() -> None:
    async with open_agent(fake("stubborn_agent.py", "--ignore-sigterm"), shutdown=QUICK) as agent:
        await initialize(agent)
    assert agent.exit_status is not None
    assert agent.exit_status.signal == signal.SIGKILL
    assert agent.exit_status.describe() == "killed by SIGKILL"


async def test_an_agent_that_exits_on_eof_is_not_signalled() -> None:
    async with open_agent(fake("echo_agent.py")) as agent:
        await initialize(agent)
    assert agent.exit_status is not None
    assert agent.exit_status.returncode == 0


async def test_an_exception_in_the_body_still_kills_the_tree_and_propagates_unwrapped() -> None:
    async with open_liveness() as liveness:
        spec = fake("forking_agent.py", "--connect-back", str(liveness.port))
        with pytest.raises(KeyError, match="boom"):
            async with open_agent(spec, shutdown=QUICK):
                peers = await liveness.accept(2)
                raise KeyError("boom")
        await liveness.assert_closed(*peers)


async def test_cancelling_the_caller_still_kills_the_tree() -> None:
    async with open_liveness() as liveness:
        spec = fake("forking_agent.py", "--connect-back", str(liveness.port))
        with anyio.CancelScope() as scope:
            async with open_agent(spec, shutdown=QUICK):
                peers = await liveness.accept(2)
                scope.cancel()
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        await liveness.assert_closed(*peers)


async def test_a_stderr_flood_never_blocks_and_its_tail_is_kept() -> None:
    forwarded: list[str] = []
    spec = fake("stderr_flood_agent.py", "--stderr-flood", "8")
    async with open_agent(spec, stderr_forward=forwarded.append) as agent:
        await initialize(agent)  # the agent floods 8 MB before it answers
        assert agent.stderr_bytes >= 8 * 1024 * 1024
        assert "STDERR-FLOOD-END initialize" in agent.stderr_tail(1)
    assert forwarded[-1].startswith("STDERR-FLOOD-END")


async def test_non_json_noise_on_stdout_is_skipped() -> None:
    async with open_agent(fake("noisy_agent.py")) as agent:
        result = await initialize(agent)
    assert result["protocolVersion"] == 1


async def test_an_agent_that_closes_stdout_but_lives_is_seen_as_gone() -> None:
    async with open_agent(fake("garbage_agent.py", "--close-stdout"), shutdown=QUICK) as agent:
        peer = JsonRpcPeer(agent.stdout, agent.stdin, name="garbage")
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            with pytest.raises(ConnectionClosedError), anyio.fail_after(20):
                await peer.request("initialize", {"protocolVersion": 1})
        assert not agent.has_exited  # alive, but useless: the caller closes it
    assert agent.has_exited


async def test_a_command_that_does_not_exist_is_a_spawn_error() -> None:
    with pytest.raises(SpawnError, match="could not start") as info:
        async with open_agent(AgentSpec(["/nonexistent/agent-binary"])):
            pass
    assert isinstance(info.value.__cause__, OSError)


async def test_the_environment_can_be_added_to_removed_from_and_allowlisted() -> None:
    spec = AgentSpec(
        [sys.executable, "-c", "import os, sys; sys.stderr.write(repr(sorted(os.environ)))"],
        env={"ADDED": "1"},
        env_allowlist=frozenset({"PATH", "SECRET", "KEEP"}),
        env_remove=frozenset({"SECRET"}),
    )
    base = {"PATH": "/usr/bin", "SECRET": "x", "KEEP": "y", "OTHER": "z"}
    async with open_agent(spec, base_env=base) as agent:
        await agent.wait_exited()
    names = agent.stderr_tail()
    assert "'ADDED'" in names and "'KEEP'" in names and "'PATH'" in names
    assert "SECRET" not in names and "OTHER" not in names


# -- kill_now: the "stop now" path (a second signal) ----------------------------------------

SLOW_STOP = ShutdownTimeouts(stdin_close_grace_s=30, term_grace_s=30, kill_wait_s=5)
"""Bounds so long that a test finishing at all proves kill_now cut them short."""


async def test_kill_now_kills_the_whole_tree_at_once_and_leaving_does_not_wait() -> None:
    """Before kill_now existed, leaving open_agent with a lingering agent that ignores SIGTERM
    always waited out EOF and SIGTERM grace (here 60 s) before SIGKILL."""
    async with open_liveness() as liveness:
        spec = fake(
            "stubborn_agent.py", "--ignore-sigterm", "--fork", "--connect-back", str(liveness.port)
        )
        with anyio.fail_after(10):  # far below the 60 s of the graceful sequence
            async with open_agent(spec, shutdown=SLOW_STOP) as agent:
                peers = await liveness.accept(2)
                agent.kill_now()
                agent.kill_now()  # idempotent
                await liveness.assert_closed(*peers)
        status = agent.exit_status
        assert status is not None and status.signal == signal.SIGKILL


async def test_kill_now_during_a_graceful_stop_finishes_it_without_a_false_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_liveness() as liveness:
        spec = fake("stubborn_agent.py", "--ignore-sigterm", "--connect-back", str(liveness.port))
        async with open_agent(spec, shutdown=SLOW_STOP) as agent:
            (peer,) = await liveness.accept(1)
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.aclose)  # now waiting out the 30 s EOF grace
                await anyio.lowlevel.checkpoint()
                agent.kill_now()
                with anyio.fail_after(10):
                    await liveness.assert_closed(peer)
                    await agent.wait_exited()
    assert "survived" not in caplog.text
    assert "ignored SIGTERM" not in caplog.text  # no step was taken that did not happen


async def test_kill_now_reaches_a_grandchild_that_left_the_group() -> None:
    async with open_liveness() as liveness:
        spec = fake(
            "stubborn_agent.py",
            "--fork",
            "--setsid-grandchild",
            "--connect-back",
            str(liveness.port),
        )
        with anyio.fail_after(10):
            async with open_agent(spec, shutdown=SLOW_STOP) as agent:
                peers = await liveness.accept(2)
                agent.kill_now()
                await liveness.assert_closed(*peers)


async def test_leaving_returns_while_an_escaped_grandchild_holds_stderr() -> None:
    """A grandchild in its own session, orphaned (neither in the group nor in any snapshot),
    keeps stdout and stderr open: every wait of the shielded stop is bounded and the pump is
    stopped in a ``finally``, so leaving returns; the grandchild is ours to kill here."""
    async with open_liveness() as liveness:
        spec = fake(
            "forking_agent.py",
            "--orphan-exit",
            "--setsid-grandchild",
            "--connect-back",
            str(liveness.port),
        )
        with anyio.fail_after(20):
            async with open_agent(spec, shutdown=QUICK) as agent:
                peers = await liveness.accept(2)
                await agent.wait_exited()
        grandchild = next(p for p in peers if p.role == "grandchild")
        for peer in peers:  # closing its connect-back socket makes the grandchild exit
            await peer.stream.aclose()
        assert grandchild.pid != agent.pid


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_reads_an_agents_pipes_a_pipes_worth_at_a_time() -> None:
    """asyncio's pipe transports ask for 256 KiB per read: a buffer above glibc's mmap threshold,
    mapped and faulted in on every read although a pipe holds 64 KiB. The launcher lowers it
    (pinned to asyncio: trio reads what the caller asks for). A flood still arrives whole."""
    from acp_bridge.process.launcher import PIPE_READ_BYTES

    code = "import os; os.write(1, b'x' * 300_000)"
    async with open_agent(AgentSpec([sys.executable, "-c", code]), shutdown=QUICK) as agent:
        transport = agent._process._transport  # type: ignore[attr-defined]
        for fd in (1, 2):
            assert transport.get_pipe_transport(fd).max_size == PIPE_READ_BYTES
        received = 0
        with anyio.fail_after(20):
            while received < 300_000:
                received += len(await agent.stdout.receive(1 << 20))
        assert received == 300_000
