"""The CLI column of the interop matrix: ``acp-bridge run --json`` driven as a user would.

- ``run -m HELLO``: initialize (``agent_started``), ``session/new`` (``session`` how ``new``),
  the streamed turn (``turn_ended`` ``done`` with the text).
- cancel: ``run -m SLOW``, SIGINT after the first chunk (or 1 s after ``turn_started``): exit
  130 and the turn recorded ``cancelled``.
- restart: ``run`` reading messages from stdin; after the first turn the agent (pid from
  ``agent_started``) is SIGKILLed, ``session_restored`` must follow, and the next stdin message
  must stream on the restored session; stdin EOF then ends the run with exit 0.
- load: ``run --resume -m HELLO`` in a new process: ``session`` how ``load``, then the turn.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from scripts.interop.peers import HELLO, Agent, offline_env, verdict


def run_json(workdir: Path, store: str, timeout: float, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "acp_bridge",
        "run",
        "--json",
        "--cwd",
        str(workdir),
        "--store",
        str(workdir / store),
        "--startup-timeout",
        str(timeout),
        *args,
    ]


def events_of(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def chunks_of(events: list[dict[str, Any]]) -> str:
    parts = []
    for event in events:
        update = event.get("update") or {}
        if event.get("event") == "update" and update.get("sessionUpdate") == "agent_message_chunk":
            parts.append((update.get("content") or {}).get("text") or "")
    return "".join(parts)


def judge_turn(events: list[dict[str, Any]], expect: str, code: int) -> dict[str, Any]:
    ended = [e for e in events if e.get("event") in ("turn_ended", "turn_failed")]
    text = chunks_of(events)
    if not ended:
        return verdict(False, f"no turn_ended event (exit {code})")
    last = ended[-1]
    ok = last.get("state") == "done" and expect in text and code == 0
    detail = f"{last.get('stopReason')} / {last.get('state')}, exit {code}: {text[:120]!r}"
    if last.get("event") == "turn_failed":
        detail = f"turn_failed {json.dumps(last.get('error'))[:200]}, exit {code}"
    return verdict(ok, detail if ok else f"expected {expect!r}; {detail}")


def cli_scenario(
    agent: Agent, agent_argv: list[str], workdir: Path
) -> tuple[dict[str, Any], dict[str, Any], str]:
    checks: dict[str, Any] = {}
    timeout = agent.step_timeout
    argv = run_json(workdir, "store.db", timeout, "-m", HELLO, "--", *agent_argv)
    result = subprocess.run(
        argv, capture_output=True, text=True, cwd=workdir, env=offline_env(), timeout=timeout * 4
    )
    stderr = result.stderr
    events = events_of(result.stdout)
    started = [e for e in events if e.get("event") == "agent_started"]
    if not started:
        checks["initialize"] = verdict(
            False, f"no agent_started event, exit {result.returncode}: {stderr.strip()[-200:]}"
        )
        return checks, {}, stderr
    info = {"agentInfo": started[0].get("agentInfo")}
    checks["initialize"] = verdict(True, f"protocol {started[0].get('protocolVersion')}")
    session = next((e for e in events if e.get("event") == "session"), None)
    if session is None or session.get("how") != "new":
        checks["session/new"] = verdict(False, f"session event {session}, exit {result.returncode}")
        return checks, info, stderr
    checks["session/new"] = verdict(True, str(session.get("sessionId")))
    checks["stream"] = judge_turn(events, agent.expect, result.returncode)
    if agent.slow:
        checks["cancel"], cancel_err = cli_cancel(agent, agent_argv, workdir)
        stderr += cancel_err
    if agent.loads:
        checks["restart"], restart_err = cli_restart(agent, agent_argv, workdir)
        stderr += restart_err
    if agent.loads:
        argv = run_json(workdir, "store.db", timeout, "--resume", "-m", HELLO, "--", *agent_argv)
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=workdir,
            env=offline_env(),
            timeout=timeout * 4,
        )
        stderr += result.stderr
        events = events_of(result.stdout)
        session = next((e for e in events if e.get("event") == "session"), {})
        turn = judge_turn(events, agent.expect, result.returncode)
        how = session.get("how")
        turn["detail"] = f"new run --resume, session {how}; then {turn['detail']}"
        turn["ok"] = turn["ok"] and how == "load"
        checks["load"] = turn
    return checks, info, stderr


class EventPump:
    """``acp-bridge run --json`` in the background; its events read through a thread into a
    queue, so every wait has a bound. The queue is unbounded, but a run's events are bounded
    by the scenario (the longest, a cancelled flood, is cut after its first chunk)."""

    def __init__(self, argv: list[str], workdir: Path, stderr_name: str, stdin: bool) -> None:
        self.err_path = workdir / stderr_name
        self._err = self.err_path.open("w")
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            cwd=workdir,
            env=offline_env(),
        )
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._ended = False
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None at the end of stdout or after ``timeout`` seconds."""
        while not self._ended:
            try:
                line = self._lines.get(timeout=max(0.0, timeout))
            except queue.Empty:
                return None
            if line is None:
                self._ended = True
                break
            if parsed := events_of(line):
                self.events += parsed
                return parsed[0]
        return None

    def until(self, kinds: tuple[str, ...], timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while (event := self.next(deadline - time.monotonic())) is not None:
            if event.get("event") in kinds:
                return event
        return None

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self, timeout: float) -> int:
        """Wait for the exit (killed after ``timeout``), read the rest; the exit code."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        while self.next(5.0) is not None:
            pass
        self._err.close()
        return code

    def stderr(self) -> str:
        return self.err_path.read_text()


def cli_cancel(agent: Agent, agent_argv: list[str], workdir: Path) -> tuple[dict[str, Any], str]:
    """``run -m SLOW``, SIGINT after the first chunk (or 1 s after turn_started): exit 130 and
    the turn recorded cancelled."""
    assert agent.slow is not None
    argv = run_json(workdir, "cancel.db", agent.step_timeout, "-m", agent.slow, "--", *agent_argv)
    run = EventPump(argv, workdir, "cli-cancel.stderr", stdin=False)
    if run.until(("turn_started",), agent.step_timeout * 2) is None:
        run.process.kill()
        run.finish(5)
        return verdict(False, "the turn did not start in time"), run.stderr()
    run.until(("update",), 1.0)  # an agent silent until it answers is cancelled after 1 s
    run.process.send_signal(signal.SIGINT)
    code = run.finish(agent.step_timeout)
    ended = [e for e in run.events if e.get("event") in ("turn_ended", "turn_failed")]
    state = ended[-1].get("state") if ended else None
    ok = code == 130 and state == "cancelled"
    detail = f"SIGINT: exit {code}, turn {state}, {len(chunks_of(run.events))} chars streamed"
    return verdict(ok, detail), run.stderr()


def cli_restart(agent: Agent, agent_argv: list[str], workdir: Path) -> tuple[dict[str, Any], str]:
    """Messages on stdin; the agent SIGKILLed between two turns; the second must stream on the
    restored session."""
    argv = run_json(workdir, "restart.db", agent.step_timeout, "--", *agent_argv)
    run = EventPump(argv, workdir, "cli-restart.stderr", stdin=True)
    timeout = agent.step_timeout * 2
    started = run.until(("agent_started",), timeout)
    run.send(HELLO)
    first = run.until(("turn_ended", "turn_failed"), timeout)
    if started is None or first is None or first.get("state") != "done":
        run.process.kill()
        run.finish(5)
        return verdict(False, f"the first turn did not end done: {first}"), run.stderr()
    os.kill(int(started["pid"]), signal.SIGKILL)
    restored = run.until(("session_restored", "session_replaced", "agent_gave_up"), timeout)
    mark = len(run.events)
    run.send(HELLO)
    second = run.until(("turn_ended", "turn_failed"), timeout)
    assert run.process.stdin is not None
    run.process.stdin.close()
    code = run.finish(timeout)
    turn = judge_turn(run.events[mark:], agent.expect, code)
    kind = restored.get("event") if restored else "nothing"
    how = restored.get("how") if restored else None
    turn["detail"] = f"agent pid {started['pid']} SIGKILLed, {kind} ({how}); then {turn['detail']}"
    turn["ok"] = turn["ok"] and kind == "session_restored" and second is not None
    return turn, run.stderr()
