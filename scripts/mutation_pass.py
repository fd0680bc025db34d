"""A small, hand-picked mutation pass over the lifecycle code: break a guard, run the tests that
should notice, restore. Prints one line per mutant: killed (a test failed) or SURVIVED.

    python scripts/mutation_pass.py            # every mutant (about 10 minutes on 2 cores)
    python scripts/mutation_pass.py lifecycle  # only mutants whose name contains "lifecycle"

Each mutant is an exact text replacement that must match once; the file is restored in a
``finally``, whatever happens. The tests run with ``-x`` and a per-test timeout, so a mutant that
makes something hang counts as killed by the timeout.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


SUPERVISED = "tests/client/test_supervised.py"
DEFECTS = "tests/client/test_lifecycle_defects.py"
DRIVER = "tests/client/test_turn_driver.py"
SETTLE = "tests/client/test_settle_window.py"
TURN_STREAMS = "tests/client/test_turn_streams.py"
TURN_PERFORMER = "tests/client/test_turn_performer.py"
DEADLINES = "tests/client/test_turn_deadlines.py"
TURN_MACHINE = "tests/unit/test_turn_machine.py"
LIFECYCLE = "tests/unit/test_lifecycle.py"
CONVERSATION = "tests/conversation"
WRITE_NOW = "tests/rpc/test_write_now.py"

MUTANTS = [
    Mutant(
        "lifecycle: never remember that a generation got ready",
        "acp_bridge/core/lifecycle.py",
        "        self._ever_ready = True\n",
        "        pass\n",
        (LIFECYCLE, DEFECTS),
    ),
    Mutant(
        "lifecycle: the exit history is never trimmed",
        "acp_bridge/core/lifecycle.py",
        "        del self.history[:-_HISTORY_KEPT]\n",
        "",
        (LIFECYCLE,),
    ),
    Mutant(
        "lifecycle: a revive does not clear the history",
        "acp_bridge/core/lifecycle.py",
        "            self.history.clear()\n",
        "",
        (LIFECYCLE, DEFECTS),
    ),
    Mutant(
        "supervisor: waiters are not notified after a transition",
        "acp_bridge/core/supervisor.py",
        "        actions = self.lifecycle.handle(event)\n        self.changed.notify_all()\n",
        "        actions = self.lifecycle.handle(event)\n",
        (DEFECTS, SUPERVISED),
    ),
    Mutant(
        "supervisor: an exit does not fail the turns in flight",
        "acp_bridge/client/supervisor.py",
        "                turn.fail_now(failure)\n",
        "                pass\n",
        (SUPERVISED, DEFECTS),
    ),
    Mutant(
        "turn: finish_now's already-ended guard removed",
        "acp_bridge/client/turn.py",
        '        """The agent answered the prompt. Ignored once the turn ended."""\n'
        "        if self._answer is not None or self._failure is not None:\n            return\n",
        '        """The agent answered the prompt. Ignored once the turn ended."""\n',
        (DEFECTS,),
    ),
    Mutant(
        "turn: fail_now's already-ended guard removed",
        "acp_bridge/client/turn.py",
        '        """The turn ended without an answer. Ignored once the turn ended."""\n'
        "        if self._answer is not None or self._failure is not None:\n"
        "            return\n        self._failure = failure\n",
        '        """The turn ended without an answer. Ignored once the turn ended."""\n'
        "        self._failure = failure\n",
        (DEFECTS,),
    ),
    Mutant(
        "turn: a cancelled turn does not close its open tool calls",
        "acp_bridge/client/turn.py",
        "        elif outcome.status is TurnStatus.CANCELLED or (answer and answer.is_cancelled()):\n",  # noqa: E501
        "        elif False:\n",
        (DRIVER, SUPERVISED, DEFECTS),
    ),
    Mutant(
        "turn: the quarantine is not performed",
        "acp_bridge/client/turn.py",
        "                await host.quarantine(reason)\n",
        "                pass\n",
        (DEFECTS, DRIVER),
    ),
    Mutant(
        "turn: an unwritable cancel is not reported to the machine",
        "acp_bridge/client/turn.py",
        "                if host is not None and not await host.write_cancel():\n"
        "                    await self._perform(self._feed(CancelUnwritable()))\n",
        "                if host is not None:\n                    await host.write_cancel()\n",
        (TURN_PERFORMER, DEFECTS),
    ),
    Mutant(
        "session: leaving a turn early does not cancel it",
        "acp_bridge/client/session.py",
        "                    await turn.cancel(EndedBy.CALLER)\n",
        "                    pass\n",
        (DEFECTS,),
    ),
    Mutant(
        "session: no settle window after a cancelled turn",
        "acp_bridge/client/session.py",
        "        if outcome is None or outcome.status is TurnStatus.DONE:\n",
        "        if True:\n",
        (DRIVER,),
    ),
    Mutant(
        "turn: the machine's close does not end the turn's delivery",
        "acp_bridge/client/turn.py",
        "        self._owed.clear()\n        self._delivering = False\n",
        "        self._owed.clear()\n",
        (TURN_PERFORMER, DRIVER),
    ),
    Mutant(
        "turn: an event delivered to an empty buffer wakes nobody",
        "acp_bridge/client/turn.py",
        "        buffer.append(event)\n        self._wakeup.notify_all()\n",
        "        buffer.append(event)\n",
        (TURN_STREAMS,),
    ),
    Mutant(
        "turn: no backpressure at the buffer's bound",
        "acp_bridge/client/turn.py",
        "        while len(buffer) > self._bound and self._reading and self._delivering:\n",
        "        while False:\n",
        (TURN_STREAMS,),
    ),
    Mutant(
        "turn: leaving the turn does not release a deliverer held at the bound",
        "acp_bridge/client/turn.py",
        "        self._buffer.clear()\n        self._wake_deliverers()\n",
        "        self._buffer.clear()\n",
        (TURN_STREAMS,),
    ),
    Mutant(
        "writer: a line goes out at once while another is being written",
        "acp_bridge/rpc/framing.py",
        "            or self._lock.locked()\n",
        "",
        (WRITE_NOW,),
    ),
    Mutant(
        "writer: a line goes out at once past lines waiting in the queue",
        "acp_bridge/rpc/framing.py",
        "            or self._queue\n",
        "",
        (WRITE_NOW,),
    ),
    Mutant(
        "fdstream: an item is written at once to a descriptor that is no pipe",
        "acp_bridge/rpc/fdstream.py",
        "        if not self._is_fifo or len(item) > select.PIPE_BUF:\n",
        "        if len(item) > select.PIPE_BUF:\n",
        (WRITE_NOW,),
    ),
    Mutant(
        "peer: a bounded notification waits without its bound",
        "acp_bridge/rpc/peer.py",
        "            with anyio.move_on_after(timeout_s):\n",
        "            with anyio.CancelScope():\n",
        (WRITE_NOW,),
    ),
    Mutant(
        "session: the settle window's quiet counts from the next prompt, not the turn's end",
        "acp_bridge/client/session.py",
        "        since, seen = settle.since, settle.seen\n",
        "        since, seen = anyio.current_time(), self.updates_seen\n",
        (SETTLE,),
    ),
    Mutant(
        "session: an update after the turn's end does not start the settle window again",
        "acp_bridge/client/session.py",
        "                since, seen = anyio.current_time(), self.updates_seen\n",
        "                break\n",
        (SETTLE, DRIVER),
    ),
    Mutant(
        "turn: a flooding agent keeps a deadline from expiring",
        "acp_bridge/client/turn.py",
        "                if self._watched:  # a deadline runs",
        "                if False:  # a deadline runs",
        (TURN_PERFORMER, DEFECTS),
    ),
    Mutant(
        "turn: a waiter sleeps past the machine's next deadline",
        "acp_bridge/client/turn.py",
        "            with anyio.CancelScope(deadline=self._deadline):\n",
        "            with anyio.CancelScope():\n",
        (DEADLINES, TURN_PERFORMER),
    ),
    Mutant(
        "turn: a cancel asked for without blocking is never written",
        "acp_bridge/client/turn.py",
        "        elif self._owed:\n            await self._perform_owed()\n",
        "        elif False:\n            await self._perform_owed()\n",
        (TURN_PERFORMER, DRIVER),
    ),
    Mutant(
        "turn: a quarantine with no exit report in time leaves the turn's agent side open",
        "acp_bridge/client/turn.py",
        "            if not self.is_done:  # no report in time",
        "            if False:  # no report in time",
        (TURN_PERFORMER,),
    ),
    Mutant(
        "handlers: updates after the turn ended are not fenced",
        "acp_bridge/client/handlers.py",
        "            and not turn.is_closed  # closed by its answer",
        "            and True  # closed by its answer",
        (DRIVER, DEFECTS),
    ),
    Mutant(
        "handlers: updates of the previous turn's messageIds are not fenced",
        "acp_bridge/client/handlers.py",
        '            and update.get("messageId") not in session.fenced_message_ids\n',
        "",
        (DRIVER,),
    ),
    Mutant(
        "turn machine: a second cancel re-arms the grace window",
        "acp_bridge/core/turn_machine.py",
        "    (_C, TurnCancelRequested): _M._nothing,\n",
        "    (_C, TurnCancelRequested): _M._cancel,\n",
        (TURN_MACHINE,),
    ),
    Mutant(
        "turn machine: the early cancel is forgotten when the prompt goes out",
        "acp_bridge/core/turn_machine.py",
        "    (_A, PromptSent): _M._sent_after_a_cancel,\n",
        "    (_A, PromptSent): _M._sent,\n",
        (TURN_MACHINE, TURN_PERFORMER, DRIVER),
    ),
    Mutant(
        "toolcalls: a closed tool call's late update is accepted",
        "acp_bridge/client/toolcalls.py",
        "        if tool_call_id in self._closed:\n            return False\n",
        "",
        ("tests/unit/test_toolcalls.py",),
    ),
    Mutant(
        "conversation: a stop does not wait for the turn to be recorded",
        "acp_bridge/conversation/conversation.py",
        "        bound = STOP_NOW_WAIT_S if self._hurry else self.stop_bound_s\n",
        "        bound = 0.0\n",
        (CONVERSATION,),
    ),
    # The five that survived a hand mutation pass (issue 19), each with the test that kills it.
    Mutant(
        "splitter: a whole over-long line inside one read is never size-checked",
        "acp_bridge/rpc/splitter.py",
        "        if run_bytes > cap and max(map(len, lines)) > cap:\n",
        "        if False:\n",
        ("tests/unit/test_splitter.py", "tests/unit/test_framing.py", "tests/proxy/test_lines.py"),
    ),
    Mutant(
        "proxy: the orphan table is never trimmed",
        "acp_bridge/proxy/routing.py",
        "        while len(self._orphans) > self._max_orphans:\n"
        "            self._orphans.popitem(last=False)\n",
        "",
        ("tests/proxy/test_pure.py",),
    ),
    Mutant(
        "cli: run --json's spawn_failed reported as agent_failed",
        "acp_bridge/cli/failures.py",
        '        code = "spawn_failed"\n',
        '        code = "agent_failed"\n',
        ("tests/e2e/test_run_contract.py",),
    ),
    Mutant(
        "store: the exactly-once guard dropped from the statement that records the turn",
        "acp_bridge/conversation/store_writes.py",
        "\" WHERE conversation_id = ? AND seq = ?\"\n"
        "                    \" AND state IN ('queued', 'running', 'steering')\",",
        "\" WHERE conversation_id = ? AND seq = ?\",",
        ("tests/conversation/test_store.py",),
    ),
    Mutant(
        "proxy: the editor's in-flight bound is not enforced",
        "acp_bridge/proxy/relay.py",
        "        if self._editor_requests.is_full:\n",
        "        if False:\n",
        ("tests/proxy/test_relay.py",),
    ),
]


def run(mutant: Mutant) -> tuple[bool, float, str]:
    path = ROOT / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        return False, 0.0, f"mutant text matches {original.count(mutant.old)} times: fix the list"
    path.write_text(original.replace(mutant.old, mutant.new))
    started = time.monotonic()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "--timeout",
                "60",
                *mutant.tests,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        last = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
        return result.returncode != 0, time.monotonic() - started, last
    except subprocess.TimeoutExpired:
        return True, time.monotonic() - started, "the test run hung past 900 s"
    finally:
        path.write_text(original)


def main() -> int:
    wanted = sys.argv[1] if len(sys.argv) > 1 else ""
    survivors = 0
    for mutant in MUTANTS:
        if wanted not in mutant.name:
            continue
        killed, seconds, last = run(mutant)
        survivors += not killed
        verdict = "killed  " if killed else "SURVIVED"
        print(f"{verdict} {seconds:5.0f} s  {mutant.name}  [{last}]", flush=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
