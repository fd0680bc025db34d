"""Every proxy buffer is bounded in bytes (issue 20, defect 2): a side that stops reading stops
the proxy reading the other side, and its memory stays under design.md's 200 MB.

Before: the buffers were bounded in lines (128 per writer, 256 in the backlog, of up to 64 MiB
each), so an editor that stopped reading while the agent wrote 16 MB updates took the proxy
to 972 MiB, and an agent that stopped reading took it to 730 MiB. The floods here are 20 lines
of 16 MiB (320 MiB), through the real ``acp-bridge proxy`` process driven by the scripted
hostile editor. Each waits until the flood is stuck at the bound (the pipes full, the proxy
asleep), then asserts the proxy's RSS (psutil) and its peak (``VmHWM``, every moment before
included): the bound, never a speed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

from scripts.bench.pipes import peak_rss_bytes
from tests.proxy.harness import agent
from tests.proxy.hostile import RSS_BOUND, open_hostile_editor

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform != "linux", reason="reads pipes and memory from /proc"),
]

HUGE = 16 * 1024 * 1024
FLOOD = 20
ECHO = agent("echo_agent.py", "--quiet")


def _rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


async def test_an_editor_that_stops_reading_stops_the_proxy_reading_the_agent() -> None:
    """The agent writes 20 updates of 16 MiB to an editor that stopped reading after the
    handshake: the proxy holds at most its bound (32 MiB) and a line, the agent's writes block.
    Once the editor reads again every update arrives, and the turn ends as it should."""
    program = "; ".join([f"huge {HUGE}"] * FLOOD)
    steps = ["handshake", "stop-reading", f"prompt {program}", "sync"]
    steps += ["read-again", "wait-answer", "sync", "close"]
    async with open_hostile_editor(steps, agent_argv=ECHO) as editor:
        await editor.event("sync")
        proxy = editor.proxy_pid
        await editor.wait_stuck((proxy, 1), (editor.agent_pid, 1))
        assert _rss(proxy) < RSS_BOUND
        await editor.release()
        answer = await editor.event("answer")
        assert answer["result"] == {"stopReason": "end_turn"}
        await editor.event("sync")
        assert peak_rss_bytes(proxy) < RSS_BOUND  # the drain included
        await editor.release()
        assert (await editor.event("exited"))["code"] == 0
        assert (await editor.event("done"))["updates"] == FLOOD  # nothing dropped


async def test_a_signal_stops_the_proxy_while_the_editor_does_not_read() -> None:
    """Our last lines get the flush bound (2 s), then are dropped: the proxy used to wait for
    ever on a 16 MiB line it had started to write to an editor that never read again."""
    program = "; ".join([f"huge {HUGE}"] * 4)
    steps = ["handshake", "stop-reading", f"prompt {program}", "sync", "close"]
    async with open_hostile_editor(steps, agent_argv=ECHO) as editor:
        await editor.event("sync")
        await editor.wait_stuck((editor.proxy_pid, 1), (editor.agent_pid, 1))
        editor.terminate_proxy()
        await editor.release()
        assert (await editor.event("exited"))["code"] == 0


async def test_an_agent_that_stops_reading_stops_the_proxy_reading_the_editor() -> None:
    """The agent stops reading its stdin in a turn; the editor then sends 20 messages of
    16 MiB. The proxy holds at most its bound and a line toward the agent, and the editor's
    writes block. A signal still stops everything (the proxy used to hang on trio, in the
    middle of a 16 MiB line to an agent that never read again)."""
    steps = ["handshake", "prompt deaf; wait 600", f"flood {FLOOD} {HUGE} notify", "close"]
    async with open_hostile_editor(steps, agent_argv=ECHO) as editor:
        await editor.event("flooding")
        proxy = editor.proxy_pid
        await editor.wait_stuck((proxy, 0), (editor.agent_pid, 0))
        assert _rss(proxy) < RSS_BOUND
        assert peak_rss_bytes(proxy) < RSS_BOUND
        editor.terminate_proxy()
        assert (await editor.event("flooded"))["count"] < FLOOD
        assert (await editor.event("exited"))["code"] == 0


async def test_the_editors_messages_waiting_for_a_restart_are_bounded_in_bytes(
    tmp_path: Path,
) -> None:
    """The agent crashes and its replacement never finishes the restore (it hangs on
    ``session/load``): the editor's 20 messages of 16 MiB wait in the backlog, up to the
    bound, and the proxy stops reading the editor."""
    flags = ["--load", "--hang-on", "session/load", "--crash-once-file", str(tmp_path / "once")]
    steps = ["handshake", "prompt echo before; crash", "wait-for before"]
    steps += [f"flood {FLOOD} {HUGE} notify", "close"]
    async with open_hostile_editor(steps, agent_argv=[*ECHO, *flags]) as editor:
        await editor.event("flooding")
        proxy = editor.proxy_pid
        await editor.wait_stuck((proxy, 0))
        assert _rss(proxy) < RSS_BOUND
        assert peak_rss_bytes(proxy) < RSS_BOUND
        editor.terminate_proxy()
        assert (await editor.event("flooded"))["count"] < FLOOD
        assert (await editor.event("exited"))["code"] == 0


async def test_prompts_queued_past_the_byte_bound_are_refused_and_cancel_still_passes() -> None:
    """Prompts behind a running turn wait up to --max-buffer-bytes (all sessions together);
    the next one is refused at once, never waited for, so the editor's cancel is still read:
    it ends the turn and answers the queued prompts cancelled."""
    size = 400_000
    steps = ["handshake", "prompt wait", f"flood 5 {size} prompt", "cancel"]
    steps += ["wait-answer flood-4", "wait-answer flood-3", "wait-answer flood-2"]
    steps += ["wait-answer flood-1", "wait-answer flood-0", "wait-answer 3", "close"]
    options = ["--max-buffer-bytes", "1000000"]
    async with open_hostile_editor(steps, agent_argv=ECHO, options=options) as editor:
        answers = [await editor.event("answer") for _ in range(6)]
        by_id = {answer["id"]: answer for answer in answers}
        # Queued while fewer than 1,000,000 bytes waited: 0, 400,000 and 800,000.
        for queued in ("flood-0", "flood-1", "flood-2"):
            assert by_id[queued]["result"] == {"stopReason": "cancelled"}
        for refused in ("flood-3", "flood-4"):
            error = by_id[refused]["error"]
            assert error["code"] == -32603
            assert "--max-buffer-bytes" in error["message"]
        assert by_id[3]["result"] == {"stopReason": "cancelled"}  # the agent's own answer
        assert (await editor.event("exited"))["code"] == 0
