"""Regression tests for the lifecycle defects of issue 7, against real fake agents.

Each test failed on the code before the agent lifecycle machine and the turn's one owner:
a waiter stranded by a swapped ready Event, a second grace window (and a second
``session/cancel``) after the driver quarantined, a turn that could end twice, and a close
that waited forever to hand a tool-call closing to a full turn buffer.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.events import AgentExited, AgentGaveUp, AgentRestarting, SessionRestored
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
from acp_bridge.client.turn import Turn, TurnPolicy
from acp_bridge.client.turn_driver import TurnDriver
from acp_bridge.core.lifecycle import AgentPhase
from acp_bridge.core.turn_machine import EndedBy, TurnStatus, TurnTimings
from acp_bridge.errors import AgentExitedError, ResourceClosedError
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from acp_bridge.wire.acp import PromptAnswer

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
OPTIONS = ClientOptions(
    restart=RestartPolicy(initial_delay_s=0.05, max_delay_s=0.1, max_restarts=5),
    shutdown=ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5),
    startup_timeout_s=20,
    cancel_grace_s=0.5,
)


def fake(script: str, *flags: str) -> AgentSpec:
    return AgentSpec([sys.executable, "-u", str(AGENTS / script), *flags], name=script[:-3])


async def next_event(agent: SupervisedAgent, kind: type) -> Any:
    events = agent.subscribe()
    with events, anyio.fail_after(20):
        async for event in events:
            if isinstance(event, kind):
                return event
    raise AssertionError(f"no {kind.__name__} before the events ended")


async def test_a_caller_waiting_through_a_restart_that_fails_before_initialize_is_woken(
    tmp_path: Path,
) -> None:
    """Generation 2 dies before ``initialize``; generation 3 restores the session. A caller
    that began waiting during generation 2's start must be served by generation 3 (it hung
    forever when every detach swapped in a new ready Event)."""
    crashed_once = tmp_path / "initialize-crashed"
    crashed_once.touch()  # generation 1 starts normally
    spec = fake(
        "crashy_agent.py",
        "--crash-on",
        "initialize",
        "--crash-once-file",
        str(crashed_once),
        "--history",
        str(tmp_path / "history.json"),
    )
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        crashed_once.unlink()  # the next start crashes during initialize, once
        restarting = agent.subscribe()
        await agent.quarantine("test: restart it")
        with anyio.fail_after(20):
            async for event in restarting:
                if isinstance(event, AgentRestarting):
                    break
        restarting.close()
        assert agent.state is not AgentPhase.READY
        with anyio.fail_after(30):
            response = await session.run("echo after the failed restart")
        assert response.stop_reason == "end_turn"
        assert agent.generation == 3
        exits = [e for e in agent.event_log if isinstance(e, AgentExited)]
        assert len(exits) == 2  # the quarantine, then the crash during initialize
        assert any(isinstance(e, SessionRestored) for e in agent.event_log)


async def test_a_driven_stubborn_turn_has_one_grace_window_and_one_cancel(
    tmp_path: Path,
) -> None:
    """The driver's grace window is the turn's only one: after it quarantines, leaving the
    turn sends no second ``session/cancel`` and waits no second window."""
    spec = fake("stubborn_agent.py", "--history", str(tmp_path / "history.json"))
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        cancels: list[str] = []
        agent.connection.peer.add_observer(
            lambda direction, line: (
                cancels.append(direction) if b"session/cancel" in bytes(line) else None
            )
        )
        driver = TurnDriver(session, TurnPolicy(timings=TurnTimings(cancel_grace_s=0.5)))

        async def cancel_soon(event: Any) -> None:
            driver.request_cancel(EndedBy.CALLER)

        with anyio.fail_after(20):
            outcome = await driver.run("echo x; hang", cancel_soon)
        assert outcome.status is TurnStatus.CANCELLED and outcome.quarantined
        assert cancels == ["out"]
        assert (await session.run("echo next")).stop_reason == "end_turn"
        assert agent.generation == 2


async def test_leaving_a_prompt_early_on_a_stubborn_agent_quarantines_it(tmp_path: Path) -> None:
    """Without a driver, ``Session.end`` performs the turn's machine: one cancel, the grace
    window, then the quarantine; the next turn runs on the restored session."""
    spec = fake("stubborn_agent.py", "--history", str(tmp_path / "history.json"))
    async with open_supervised_agent(spec, OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        with anyio.fail_after(20):
            async with session.prompt("echo x; hang") as turn:
                async for _event in turn:
                    break  # the caller leaves with the turn still running
            assert turn.is_closed
            outcome = turn.machine.outcome
            assert outcome is not None and outcome.quarantined
            assert (await session.run("echo next")).stop_reason == "end_turn"
        assert agent.generation == 2


async def test_a_turn_ends_once_whichever_of_answer_and_failure_comes_first() -> None:
    answered = Turn("s1")
    answered.finish_now(PromptAnswer.read({"stopReason": "end_turn"}))
    answered.fail_now(AgentExitedError("late failure", recoverable=True))
    assert (await answered.wait()).stop_reason == "end_turn"
    assert answered.machine.outcome is not None
    assert answered.machine.outcome.status is TurnStatus.DONE
    answered.close()

    failed = Turn("s2")
    failed.fail_now(AgentExitedError("it died", recoverable=True))
    failed.finish_now(PromptAnswer.read({"stopReason": "end_turn"}))
    with pytest.raises(AgentExitedError, match="it died"):
        await failed.wait()
    assert failed.stop_reason is None  # the late answer was not recorded beside the failure
    assert failed.machine.outcome is not None
    assert failed.machine.outcome.status is TurnStatus.FAILED
    failed.close()


async def test_closing_the_agent_never_waits_on_a_full_turn_buffer(tmp_path: Path) -> None:
    """A turn with an open tool call and a full buffer nobody reads: closing the agent fails
    it (the tool call's closing goes to the turn's tail) and returns, bounded."""
    with anyio.fail_after(30):
        async with open_supervised_agent(
            fake("slow_agent.py"), replace(OPTIONS, turn_buffer=2)
        ) as agent:
            session = await agent.new_session(tmp_path)
            buffer_full = anyio.Event()
            updates_read: list[int] = []

            def count_updates(direction: str, line: Any) -> None:
                if direction == "in" and b"session/update" in bytes(line):
                    updates_read.append(1)
                    if len(updates_read) == 3:  # two fill the buffer; the reader holds the third
                        buffer_full.set()

            agent.connection.peer.add_observer(count_updates)
            turn = await session.begin("tool in_progress; flood 50; wait")
            await buffer_full.wait()
        with pytest.raises(ResourceClosedError):
            await turn.wait()
        events = turn.take_buffered()
        turn.close()
    assert any(type(e).__name__ == "ToolCallClosed" for e in events)


async def test_a_revive_after_giving_up_wakes_waiters(tmp_path: Path) -> None:
    spec = fake("crashy_agent.py", "--crash-on", "prompt", "--exit-code", "3")
    quick = replace(OPTIONS, restart=RestartPolicy(initial_delay_s=0.01, max_restarts=0))
    async with open_supervised_agent(spec, quick) as agent:
        session = await agent.new_session(tmp_path)
        with pytest.raises(AgentExitedError):
            await session.run("boom")
        if agent.state is not AgentPhase.GAVE_UP:
            await next_event(agent, AgentGaveUp)
        waiter_served = anyio.Event()

        async def wait_for_the_revived_agent() -> None:
            await agent.wait_ready()
            waiter_served.set()

        async with anyio.create_task_group() as tg:
            await agent.revive()
            tg.start_soon(wait_for_the_revived_agent)
            with anyio.fail_after(20):
                await waiter_served.wait()
        assert agent.generation == 2


async def test_terminals_die_with_the_agent_process_that_created_them(tmp_path: Path) -> None:
    """After a crash, the old generation's terminals are killed and no longer count against
    the new generation's limit (they kept running, and counting, before)."""
    import psutil

    spec = fake("crashy_agent.py", "--crash-on", "none", "--history", str(tmp_path / "h.json"))
    async with open_supervised_agent(
        spec, replace(OPTIONS, allow_terminal=True, base_env={"PATH": "/usr/bin:/bin"})
    ) as agent:
        terminals = agent.handlers.terminals
        assert terminals is not None
        session = await agent.new_session(tmp_path)
        texts: list[str] = []
        async with session.prompt("terminal sleep 1000; terminal sleep 1000; echo made") as turn:
            async for event in turn:
                text = getattr(event, "raw", {}).get("content", {}).get("text")
                if text:
                    texts.append(text)
        assert sum(t.startswith("terminal-ok") for t in texts) == 2, texts
        old_pids = list(terminals.pids(1).values())
        assert len(old_pids) == 2
        with pytest.raises(AgentExitedError):
            await session.run("crash KILL")
        await next_event(agent, SessionRestored)
        # Generation 1's end (reported before generation 2 starts) killed and reaped them.
        assert terminals.pids(1) == {}
        for pid in old_pids:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        response = await session.run("terminal sleep 1000")
        assert response.stop_reason == "end_turn"
        assert len(terminals.pids()) == 1 and len(terminals.pids(2)) == 1


async def test_a_cancel_that_cannot_be_written_quarantines_within_its_bound(
    tmp_path: Path,
) -> None:
    """The agent stopped reading stdin and the pipe is full: ``session/cancel`` cannot be
    written. Leaving the turn waits ``cancel_write_timeout_s`` for the write (a wait inside a
    shield that used to be unbounded), then quarantines; the next turn runs on a new process."""
    spec = fake("stubborn_agent.py", "--history", str(tmp_path / "history.json"))
    quick = replace(OPTIONS, cancel_write_timeout_s=0.5, cancel_grace_s=30)
    async with open_supervised_agent(spec, quick) as agent:
        session = await agent.new_session(tmp_path)
        peer = agent.connection.peer
        with anyio.fail_after(20):
            async with session.prompt("deaf; echo deaf now; hang") as turn:
                async for _event in turn:
                    break  # the agent is deaf from here on
                filler = {"fill": "x" * 300_000}
                await peer.notify("_test/fill", filler)  # read: the last line it reads
                await peer.notify("_test/fill", filler)  # fills the pipe; the writer blocks
            outcome = turn.machine.outcome
            assert outcome is not None and outcome.quarantined
            assert outcome.error is not None and "could not be written" in outcome.error
            assert (await session.run("echo next")).stop_reason == "end_turn"
        assert agent.generation == 2


async def test_a_cancelled_answer_closes_the_open_tool_calls_without_a_driver(
    tmp_path: Path,
) -> None:
    """``Session.cancel`` then the agent's ``cancelled``: the tool call the turn left open is
    closed once, as failed, after the turn's events (no driver to close it afterwards)."""
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        events: list[Any] = []
        with anyio.fail_after(20):
            async with session.prompt("tool in_progress; echo x; wait") as turn:
                async for event in turn:
                    events.append(event)
                    if len(events) == 2:
                        await session.cancel()
            assert (await turn.wait()).stop_reason == "cancelled"
    closed = [e for e in events if type(e).__name__ == "ToolCallClosed"]
    assert len(closed) == 1 and closed[0].status == "failed"
    assert events[-1] is closed[0]


async def test_a_stubborn_agent_flooding_updates_is_still_closed_at_the_grace_window(
    tmp_path: Path,
) -> None:
    """The agent ignores the cancel and keeps flooding while the consumer is slow, so the
    turn's buffer never runs empty: the grace window must still expire (the driver reads the
    clock per event while a deadline runs)."""
    spec = fake("slow_agent.py", "--history", str(tmp_path / "history.json"))
    async with open_supervised_agent(spec, replace(OPTIONS, turn_buffer=64)) as agent:
        driver = TurnDriver(
            await agent.new_session(tmp_path),
            TurnPolicy(timings=TurnTimings(cancel_grace_s=0.5)),
        )

        async def slow_consumer(event: Any) -> None:
            driver.request_cancel(EndedBy.CALLER)
            # The behaviour under test: a consumer slower than the agent, so the buffer never
            # runs empty and the driver's wait never blocks.
            await anyio.sleep(0.002)

        with anyio.fail_after(30):
            outcome = await driver.run("on-cancel ignore; flood 200000", slow_consumer)
        assert outcome.status is TurnStatus.CANCELLED and outcome.quarantined


async def test_updates_after_the_answer_are_kept_as_strays_not_given_to_the_turn(
    tmp_path: Path,
) -> None:
    """The answer ends the turn in the reader, so the 5 chunks the agent sends after it land in
    ``session.stray_updates``: never in the turn, never lost silently."""
    async with open_supervised_agent(fake("slow_agent.py"), OPTIONS) as agent:
        session = await agent.new_session(tmp_path)
        late_seen = anyio.Event()
        late_lines: list[bytes] = []

        def count_late(direction: str, line: Any) -> None:
            if direction == "in" and b"late-" in bytes(line):
                late_lines.append(bytes(line))
                if len(late_lines) == 5:
                    late_seen.set()

        agent.connection.peer.add_observer(count_late)
        with anyio.fail_after(20):
            async with session.prompt("echo in the turn; late 5") as turn:
                texts = [
                    getattr(e, "raw", {}).get("content", {}).get("text", "") async for e in turn
                ]
                await late_seen.wait()  # still inside the turn: it is the session's current one
            await session.run("echo a later turn, after the late chunks were read")
        assert not any(text.startswith("late-") for text in texts)
        strays = [u.get("content", {}).get("text", "") for u in session.stray_updates]
        assert sum(text.startswith("late-") for text in strays) == 5
