"""TerminalManager against real processes: exit status, kill, release, limits, shutdown.

Liveness is proven by connect-back sockets (a process's socket closes when it dies), never by
sleeping; waits are on process exit, output EOF, or the manager's own events.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.client.terminal import OutputBuffer, TerminalManager
from acp_bridge.errors import ErrorCode, RpcError
from acp_bridge.process import killer
from tests.process.liveness import Liveness, Peer, open_liveness

pytestmark = pytest.mark.anyio

BASE_ENV = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"}
QUICK: dict[str, Any] = {"term_grace_s": 0.5, "kill_wait_s": 5.0}

# Dials back, says "alive <pid> <role>", then sleeps. Roles: "parent" first starts a "child"
# (same process group) or an "escapee" (its own session); "stubborn" ignores SIGTERM.
ALIVE = """
import os, signal, socket, subprocess, sys, time
port, role = int(sys.argv[1]), sys.argv[2]
if role == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if role == "escapee":
    os.setsid()
if role.startswith("parent"):
    kid = role.partition(":")[2] or "child"
    subprocess.Popen([sys.executable, "-c", sys.argv[3], str(port), kid, sys.argv[3]])
sock = socket.create_connection(("127.0.0.1", port))
sock.sendall(f"alive {os.getpid()} {role}\\n".encode())
time.sleep(60)
"""


def alive_args(liveness: Liveness, role: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-c", ALIVE, str(liveness.port), role, ALIVE]}


@asynccontextmanager
async def running(cwd: Path, **options: Any) -> AsyncIterator[TerminalManager]:
    options = {"base_env": BASE_ENV, **QUICK, **options}
    sessions = {"s1": cwd}
    manager = TerminalManager(sessions.get, **options)
    async with anyio.create_task_group() as tg:
        await tg.start(manager.run)
        try:
            yield manager
        finally:
            await manager.aclose()


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    return tmp_path.resolve()


async def create(manager: TerminalManager, **params: Any) -> str:
    result = await manager.create({"sessionId": "s1", **params})
    terminal_id: str = result["terminalId"]
    return terminal_id


def ids(terminal_id: str, session: str = "s1") -> dict[str, str]:
    return {"sessionId": session, "terminalId": terminal_id}


async def finish(manager: TerminalManager, terminal_id: str) -> dict[str, Any]:
    with anyio.fail_after(20):
        return await manager.wait_for_exit(ids(terminal_id))


# --- running commands ------------------------------------------------------------------------


async def test_output_and_exit_code_of_a_finished_command(cwd: Path) -> None:
    async with running(cwd) as manager:
        tid = await create(manager, command="sh", args=["-c", "echo hi; exit 3"])
        assert await finish(manager, tid) == {"exitCode": 3, "signal": None}
        assert await manager.output(ids(tid)) == {
            "output": "hi\n",
            "truncated": False,
            "exitStatus": {"exitCode": 3, "signal": None},
        }


async def test_stdout_and_stderr_share_one_buffer_and_stdin_is_empty(cwd: Path) -> None:
    script = "echo out; echo err >&2; cat; echo done"
    async with running(cwd) as manager:
        tid = await create(manager, command="sh", args=["-c", script])
        assert await finish(manager, tid) == {"exitCode": 0, "signal": None}
        assert (await manager.output(ids(tid)))["output"] == "out\nerr\ndone\n"


async def test_a_command_without_args_runs_through_the_shell(cwd: Path) -> None:
    async with running(cwd) as manager:
        tid = await create(manager, command="echo a && echo b | tr b c")
        await finish(manager, tid)
        assert (await manager.output(ids(tid)))["output"] == "a\nc\n"


async def test_env_and_cwd_are_respected(cwd: Path) -> None:
    (cwd / "sub").mkdir()
    env = [{"name": "GREETING", "value": "hello there"}, {"name": "LC_ALL", "value": "C"}]
    script = 'printf "%s|%s|%s\\n" "$GREETING" "$LC_ALL" "$(pwd -P)"'
    async with running(cwd) as manager:
        tid = await create(
            manager, command="sh", args=["-c", script], env=env, cwd=str(cwd / "sub")
        )
        await finish(manager, tid)
        assert (await manager.output(ids(tid)))["output"] == f"hello there|C|{cwd / 'sub'}\n"
        tid = await create(manager, command="sh", args=["-c", script])
        await finish(manager, tid)
        assert (await manager.output(ids(tid)))["output"] == f"|C.UTF-8|{cwd}\n"


async def test_a_relative_or_missing_cwd_is_refused(cwd: Path) -> None:
    async with running(cwd) as manager:
        for bad in ("sub", str(cwd / "missing")):
            with pytest.raises(RpcError) as info:
                await create(manager, command="true", args=[], cwd=bad)
            assert info.value.code == ErrorCode.INVALID_PARAMS
            assert info.value.data == {"cwd": bad, "reason": "bad_cwd"}
        assert manager.pids() == {}


async def test_env_without_a_base_environment_is_refused(cwd: Path) -> None:
    async with running(cwd, base_env=None) as manager:
        with pytest.raises(RpcError) as info:
            await create(manager, command="true", env=[{"name": "A", "value": "1"}])
        assert info.value.data["reason"] == "env_not_supported"
        tid = await create(manager, command="echo inherited")  # no env: inherits ours
        assert await finish(manager, tid) == {"exitCode": 0, "signal": None}


async def test_a_command_that_cannot_start_is_refused(cwd: Path) -> None:
    async with running(cwd) as manager:
        with pytest.raises(RpcError) as info:
            await create(manager, command=str(cwd / "no-such-program"), args=["x"])
        assert info.value.code == ErrorCode.INVALID_PARAMS
        assert info.value.data["reason"] == "spawn_failed"


async def test_an_unknown_session_is_refused(cwd: Path) -> None:
    async with running(cwd) as manager:
        with pytest.raises(RpcError) as info:
            await manager.create({"sessionId": "nobody", "command": "true"})
        assert info.value.code == ErrorCode.RESOURCE_NOT_FOUND
        assert info.value.data["reason"] == "unknown_session"


async def test_the_exit_is_reported_while_a_background_grandchild_holds_the_output(
    cwd: Path,
) -> None:
    async with running(cwd) as manager:
        tid = await create(manager, command="sh", args=["-c", "sleep 60 & echo started"])
        assert await finish(manager, tid) == {"exitCode": 0, "signal": None}
        assert (await manager.output(ids(tid)))["output"] == "started\n"
        pgid = manager.pids()[tid]
        assert killer.group_members(pgid)  # the backgrounded sleep still runs...
        await manager.release(ids(tid))
        assert killer.group_members(pgid) == []  # ...until the release


# --- kill and release ------------------------------------------------------------------------


async def test_kill_reports_the_signal_and_keeps_the_terminal(cwd: Path) -> None:
    async with running(cwd) as manager:
        tid = await create(manager, command="sh", args=["-c", "echo before; exec sleep 60"])
        assert "exitStatus" not in await manager.output(ids(tid))
        async with anyio.create_task_group() as tg:
            waited: list[dict[str, Any]] = []

            async def wait() -> None:
                waited.append(await finish(manager, tid))

            tg.start_soon(wait)
            assert await manager.kill(ids(tid)) == {}
        assert waited == [{"exitCode": None, "signal": "SIGTERM"}]
        assert await manager.output(ids(tid)) == {
            "output": "before\n",
            "truncated": False,
            "exitStatus": {"exitCode": None, "signal": "SIGTERM"},
        }
        assert await manager.kill(ids(tid)) == {}  # again: harmless
        assert await manager.release(ids(tid)) == {}


async def test_a_command_ignoring_sigterm_is_killed_with_sigkill(cwd: Path) -> None:
    async with open_liveness() as liveness, running(cwd) as manager:
        tid = await create(manager, **alive_args(liveness, "stubborn"))
        peers = await liveness.accept(1)
        await manager.kill(ids(tid))
        assert await finish(manager, tid) == {"exitCode": None, "signal": "SIGKILL"}
        await liveness.assert_closed(*peers)


@pytest.mark.parametrize("kid", ["child", "escapee"])
async def test_release_kills_the_command_and_its_grandchild(cwd: Path, kid: str) -> None:
    async with open_liveness() as liveness, running(cwd) as manager:
        tid = await create(manager, **alive_args(liveness, f"parent:{kid}"))
        peers = await liveness.accept(2)
        pgid = manager.pids()[tid]
        assert {p.role for p in peers} == {"parent:" + kid, kid}
        tracked = [psutil.Process(p.pid) for p in peers]
        assert await manager.release(ids(tid)) == {}
        await liveness.assert_closed(*peers)
        assert killer.living(tracked) == []
        assert killer.group_members(pgid) == []
        assert tid not in manager.pids()


async def test_a_released_terminal_is_unknown_afterwards(cwd: Path) -> None:
    async with running(cwd) as manager:
        tid = await create(manager, command="sleep", args=["60"])
        await manager.release(ids(tid))
        for handler in (manager.output, manager.wait_for_exit, manager.kill, manager.release):
            with pytest.raises(RpcError) as info:
                await handler(ids(tid))
            assert info.value.code == ErrorCode.RESOURCE_NOT_FOUND
            assert info.value.data == {"terminalId": tid}


async def test_a_wait_for_exit_pending_during_release_returns_the_kill(cwd: Path) -> None:
    async with running(cwd) as manager:
        tid = await create(manager, command="sleep", args=["60"])
        waited: list[dict[str, Any]] = []

        async def wait() -> None:
            waited.append(await finish(manager, tid))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            await manager.release(ids(tid))
        assert waited == [{"exitCode": None, "signal": "SIGTERM"}]


async def test_unknown_ids_and_other_sessions_terminals_are_refused(cwd: Path) -> None:
    async with running(cwd) as manager:
        tid = await create(manager, command="true", args=[])
        for params in (ids("term_nope"), ids(tid, session="s2")):
            with pytest.raises(RpcError) as info:
                await manager.output(params)
            assert info.value.code == ErrorCode.RESOURCE_NOT_FOUND
        await finish(manager, tid)


async def test_max_terminals_is_enforced_and_release_frees_a_slot(cwd: Path) -> None:
    async with running(cwd, max_terminals=2) as manager:
        first = await create(manager, command="sleep", args=["60"])
        await create(manager, command="sleep", args=["60"])
        with pytest.raises(RpcError) as info:
            await create(manager, command="sleep", args=["60"])
        assert info.value.data == {"reason": "too_many_terminals", "limit": 2}
        await manager.release(ids(first))
        await create(manager, command="true", args=[])
        assert len(manager.pids()) == 2


# --- shutdown --------------------------------------------------------------------------------


async def test_aclose_kills_every_terminal_and_refuses_new_ones(cwd: Path) -> None:
    async with open_liveness() as liveness:
        manager = TerminalManager({"s1": cwd}.get, base_env=BASE_ENV, **QUICK)
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            await create(manager, **alive_args(liveness, "parent:child"))
            await create(manager, **alive_args(liveness, "stubborn"))
            peers = await liveness.accept(3)
            await manager.aclose()
            await liveness.assert_closed(*peers)
            assert manager.pids() == {}
            with pytest.raises(RpcError):
                await create(manager, command="true")
        await manager.aclose()  # idempotent, also once run() has returned


async def test_cancelling_run_kills_every_terminal(cwd: Path) -> None:
    async with open_liveness() as liveness:
        manager = TerminalManager({"s1": cwd}.get, base_env=BASE_ENV, **QUICK)
        peers: list[Peer] = []
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            await create(manager, **alive_args(liveness, "parent:escapee"))
            await create(manager, **alive_args(liveness, "parent:child"))
            peers = await liveness.accept(4)
            tg.cancel_scope.cancel()
        await liveness.assert_closed(*peers)
        assert manager.pids() == {}


async def test_create_before_run_is_refused(cwd: Path) -> None:
    manager = TerminalManager({"s1": cwd}.get)
    with pytest.raises(RpcError) as info:
        await create(manager, command="true")
    assert info.value.code == ErrorCode.INTERNAL_ERROR


# --- output limit ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "kept"),
    [
        ("a" + "é" * 10, 5, "éé"),  # 2-byte characters: the cut lands mid-character
        ("a" + "é" * 10, 6, "ééé"),
        ("x€€€", 7, "€€"),  # 3-byte
        ("x€€€", 8, "€€"),
        ("y😀😀", 5, "😀"),  # 4-byte
        ("y😀😀", 3, ""),
        ("short", 100, "short"),
    ],
)
async def test_output_is_truncated_from_the_front_at_a_character_boundary(
    cwd: Path, text: str, limit: int, kept: str
) -> None:
    script = f"import sys; sys.stdout.buffer.write({text.encode()!r})"
    async with running(cwd) as manager:
        tid = await create(
            manager, command=sys.executable, args=["-c", script], outputByteLimit=limit
        )
        await finish(manager, tid)
        result = await manager.output(ids(tid))
        assert result["output"] == kept
        assert result["truncated"] is (len(text.encode()) > limit)


async def test_the_default_output_limit_applies(cwd: Path) -> None:
    async with running(cwd, default_output_byte_limit=4) as manager:
        tid = await create(manager, command="printf", args=["0123456789"])
        await finish(manager, tid)
        assert await manager.output(ids(tid)) == {
            "output": "6789",
            "truncated": True,
            "exitStatus": {"exitCode": 0, "signal": None},
        }


def test_a_running_commands_partial_character_is_held_back() -> None:
    buffer = OutputBuffer(100)
    buffer.feed("ok €".encode()[:-1])
    assert buffer.text(final=False) == "ok "
    assert buffer.text(final=True) == "ok \ufffd"
    buffer.feed("€".encode()[-1:])
    assert buffer.text(final=False) == "ok €"


# codec="utf-8": text an agent's command can print. Without it, hypothesis also draws lone
# surrogates (category Cs), which ``str.encode`` refuses: the test itself crashed, now and then.
@given(
    text=st.text(st.characters(codec="utf-8", exclude_characters="\ufffd"), max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8),
    limit=st.integers(min_value=0, max_value=40),
)
def test_the_buffer_keeps_the_longest_whole_character_suffix_within_the_limit(
    text: str, cuts: list[int], limit: int
) -> None:
    data = text.encode()
    buffer = OutputBuffer(limit)
    start = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        buffer.feed(data[start:cut])
        start = cut
        partial = buffer.text(final=False)
        assert "\ufffd" not in partial
        assert partial in text
    kept = buffer.text(final=True)
    assert text.endswith(kept)
    assert len(kept.encode()) <= limit
    assert buffer.truncated is (len(data) > limit)
    # Longest: one more character would not fit.
    if len(kept) < len(text):
        assert len(text[len(text) - len(kept) - 1 :].encode()) > limit


@given(
    chunks=st.lists(st.binary(max_size=12), max_size=8),
    limit=st.integers(min_value=0, max_value=40),
)
def test_any_output_bytes_become_text_that_json_can_carry(chunks: list[bytes], limit: int) -> None:
    """Whatever the command prints, the output has no lone surrogate: it encodes as UTF-8."""
    buffer = OutputBuffer(limit)
    for chunk in chunks:
        buffer.feed(chunk)
        buffer.text(final=False).encode("utf-8")
    assert len(buffer.text(final=True).encode("utf-8")) <= 3 * max(limit, 1)


def test_a_character_cut_at_the_front_is_dropped_even_when_its_tail_arrives_later() -> None:
    """Regression (found by the property below): a 4-byte character cut after its first three
    bytes left its last byte to arrive later, at the front of the buffer, as U+FFFD."""
    buffer = OutputBuffer(2)
    data = "😀0".encode()
    buffer.feed(data[:3])
    assert buffer.text(final=True) == ""
    buffer.feed(data[3:])
    assert buffer.text(final=True) == "0"
    assert buffer.truncated
