"""The soak's conversations: real ``acp-bridge run --json`` processes against fixture agents.

A worker keeps one conversation at a time going: a first run, then several ``--conversation ID``
runs (some with ``--retry-failed``), each with 1-4 messages from ``-m`` or stdin, and during
each run at most one fault: SIGINT, SIGTERM, a second SIGINT, SIGKILL of the bridge, SIGKILL or
SIGTERM of the agent (its pid from ``agent_started``), or a second process trying to own the same
conversation. Messages themselves crash the agent, flood, write garbage or stderr, or hang.
Then a drain pass (a run with one more message, which also un-pauses a queue stopped by a
signal) leaves every message final. Every run's exit code, events and RSS go to the ledger; an
agent that outlives its bridge's exit is a violation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from scripts.soak.checks import Ledger, not_final
from scripts.soak.state import Soak

COMMON = [
    ("echo {t}", 3), ("echo {t}; flood 5000", 2), ("echo {t}; flood 50000", 1),
    ("echo {t}; burst 3000", 1), ("echo {t}; wait 1", 2), ("echo {t}; wait 3", 1),
    ("echo {t}; crash KILL", 1), ("echo {t}; crash 3", 1), ("echo {t}; crash TERM", 0.5),
    ("echo {t}; stderr 1", 1), ("echo {t}; noise 5", 1), ("echo {t}; late 300", 1),
    ("echo {t}; tool in_progress", 1), ("echo {t}; trickle 20 20", 1),
]  # fmt: skip
GARBAGE = [
    ("echo {t}; non-utf8", 1), ("echo {t}; non-object", 1), ("echo {t}; batch", 1),
    ("echo {t}; unknown-id", 1), ("echo {t}; duplicate-response", 1), ("echo {t}; split-line", 1),
    ("echo {t}; crlf", 1), ("echo {t}; truncated 1", 0.5), ("echo {t}; close-stdout", 0.3),
]  # fmt: skip
PROFILES: dict[str, tuple[list[str], list[tuple[str, float]], float]] = {
    # name: (agent script and flags, programs, --turn-timeout)
    "echo": (["echo_agent.py", "--quiet"], COMMON, 30.0),
    "garbage": (["garbage_agent.py", "--quiet"], COMMON + GARBAGE, 30.0),
    "stderr": (["stderr_flood_agent.py", "--stderr-flood", "1"], COMMON, 30.0),
    "noisy": (["noisy_agent.py", "--quiet"], COMMON, 30.0),
    "stubborn": (
        ["stubborn_agent.py", "--quiet", "--ignore-sigterm"],
        [*COMMON, ("echo {t}; hang", 4)],
        3.0,
    ),
}
FAULTS = [
    ("none", 30), ("SIGINT", 12), ("SIGTERM", 10), ("SIGINT twice", 5), ("SIGKILL bridge", 13),
    ("SIGKILL agent", 12), ("SIGTERM agent", 6), ("second owner", 5),
]  # fmt: skip
_SENT = {"SIGINT": (signal.SIGINT,), "SIGINT twice": (signal.SIGINT,), "SIGTERM": (signal.SIGTERM,)}
RUN_HANG_S = 150.0
"""A run that takes longer than this is a hang: a violation, then it is killed."""
EXIT_WAIT_S = 10.0
"""How long an agent may outlive its bridge (SIGKILLed bridges: the agent sees EOF and exits)."""


def pick(rng: random.Random, table: Sequence[tuple[str, float]]) -> str:
    return rng.choices([name for name, _ in table], [w for _, w in table])[0]


@dataclass
class Run:
    """One bridge process and what it printed."""

    argv: list[str]
    fault: str = "none"
    proc: asyncio.subprocess.Process | None = None
    conversation: str | None = None
    agents: list[psutil.Process] = field(default_factory=list)
    started_turns: int = 0
    first_turn: asyncio.Event = field(default_factory=asyncio.Event)
    second_owner: asyncio.Task[bool] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at the ``session`` event: the run's signal handling is surely installed by then
    (signals before it are the start-up probe's business, see :func:`startup_probe`)."""
    stderr_tail: bytes = b""
    peak_rss_mib: float = 0.0


async def _read_events(run: Run, ledger: Ledger) -> None:
    assert run.proc is not None and run.proc.stdout is not None
    async for line in run.proc.stdout:
        if line.startswith(b'{"event":"update"'):
            ledger.counts["update events"] += 1
            continue
        try:
            event = json.loads(line)
        except ValueError:
            ledger.violate(f"run printed a line that is not JSON on stdout: {line[:200]!r}")
            continue
        name = event.get("event")
        ledger.counts[f"event {name}"] += 1
        if name == "agent_started":
            try:
                run.agents.append(psutil.Process(event["pid"]))
                ledger.counts["agents seen"] += 1
            except psutil.NoSuchProcess:
                pass
        elif name == "session":
            run.conversation = event.get("conversation")
            run.ready.set()
        elif name == "turn_started" and run.conversation:
            ledger.turn_started[(run.conversation, event["seq"])] += 1
            retry = " --retry-failed" if "--retry-failed" in run.argv else ""
            ledger.started_by[(run.conversation, event["seq"])].append(f"{run.fault}{retry}")
            run.started_turns += 1
            run.first_turn.set()


async def _read_stderr(run: Run, ledger: Ledger) -> None:
    assert run.proc is not None and run.proc.stderr is not None
    while chunk := await run.proc.stderr.read(65536):
        run.stderr_tail = (run.stderr_tail + chunk)[-8192:]
        if b"Traceback (most recent call last)" in run.stderr_tail:
            ledger.violate(f"traceback on a run's stderr: {run.stderr_tail[-1500:]!r}")
            run.stderr_tail = b""


async def _sample_rss(run: Run) -> None:
    assert run.proc is not None
    try:
        me = psutil.Process(run.proc.pid)
        while True:
            run.peak_rss_mib = max(run.peak_rss_mib, me.memory_info().rss / 2**20)
            await asyncio.sleep(0.25)
    except psutil.Error:
        return


async def _feed(run: Run, lines: list[str], rng: random.Random) -> None:
    assert run.proc is not None and run.proc.stdin is not None
    try:
        for text in lines:
            run.proc.stdin.write(text.encode() + b"\n")
            await run.proc.stdin.drain()
            await asyncio.sleep(rng.uniform(0, 0.4))
        run.proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass


def _signal(run: Run, signum: int) -> bool:
    assert run.proc is not None
    if run.proc.returncode is not None:
        return False
    try:
        run.proc.send_signal(signum)
    except ProcessLookupError:
        return False
    return True


async def _fault(soak: Soak, run: Run, fault: str, rng: random.Random) -> None:
    """Wait for the first turn (or a moment), then do the fault; counted only when done."""
    try:
        await asyncio.wait_for(run.ready.wait(), timeout=60)
    except TimeoutError:
        soak.ledger.counts["fault skipped (run never ready)"] += 1
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(run.first_turn.wait(), timeout=rng.uniform(1, 6))
    await asyncio.sleep(rng.uniform(0, 1.5))
    done = False
    if fault == "SIGINT" or fault == "SIGTERM":
        done = _signal(run, signal.SIGINT if fault == "SIGINT" else signal.SIGTERM)
    elif fault == "SIGINT twice":
        done = _signal(run, signal.SIGINT)
        await asyncio.sleep(rng.uniform(0.01, 0.3))
        _signal(run, signal.SIGINT)
    elif fault == "SIGKILL bridge":
        done = _signal(run, signal.SIGKILL)
    elif fault in ("SIGKILL agent", "SIGTERM agent") and run.agents:
        try:
            agent = run.agents[-1]
            agent.send_signal(signal.SIGKILL if fault == "SIGKILL agent" else signal.SIGTERM)
            done = True
        except psutil.Error:
            pass
    elif fault == "second owner" and run.conversation:
        # Its own task, awaited by bridge_run: the first owner's exit must not abandon it.
        run.second_owner = asyncio.create_task(_second_owner(soak, run.conversation))
        done = await asyncio.shield(run.second_owner)
    soak.ledger.counts[f"fault {fault}" if done else "fault skipped (run already over)"] += 1


async def _second_owner(soak: Soak, conversation: str) -> bool:
    tag = soak.tag("Q")
    argv = soak.run_argv(["--conversation", conversation, "-m", f"echo {tag}"])
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=soak.env, cwd=soak.workdir, start_new_session=True,
    )  # fmt: skip
    soak.live.add(proc)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_HANG_S)
    finally:
        soak.live.discard(proc)
    if proc.returncode == 2 and b"is in use by" in err:
        soak.ledger.refused_tags.add(tag)
        soak.ledger.counts["second owner refused"] += 1
        return True
    if proc.returncode in (0, 4) and b'"session"' in out:
        # The first owner had already exited: this run was the owner. Fine, not a refusal.
        soak.ledger.counts["second owner ran (the first had exited)"] += 1
        return False
    soak.ledger.violate(f"second owner: exit {proc.returncode}, stderr {err[-600:]!r}")
    return False


async def bridge_run(soak: Soak, args: list[str], stdin_lines: list[str] | None,
                     fault: str, rng: random.Random) -> Run:  # fmt: skip
    """One ``acp-bridge run``: spawn, read, fault, wait, judge its exit and its agents."""
    ledger = soak.ledger
    run = Run(soak.run_argv(args), fault)
    run.proc = await asyncio.create_subprocess_exec(
        *run.argv,
        stdin=asyncio.subprocess.PIPE if stdin_lines is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=soak.env, cwd=soak.workdir, start_new_session=True, limit=64 * 2**20,
    )  # fmt: skip
    soak.live.add(run.proc)
    ledger.counts["bridge runs"] += 1
    readers = [asyncio.create_task(_read_events(run, ledger)),
               asyncio.create_task(_read_stderr(run, ledger))]  # fmt: skip
    helpers = [asyncio.create_task(_sample_rss(run))]
    if stdin_lines is not None:
        helpers.append(asyncio.create_task(_feed(run, stdin_lines, rng)))
    if fault != "none":
        helpers.append(asyncio.create_task(_fault(soak, run, fault, rng)))
    try:
        await asyncio.wait_for(run.proc.wait(), RUN_HANG_S)
    except TimeoutError:
        ledger.violate(f"run hung for {RUN_HANG_S:.0f} s: {' '.join(run.argv[-8:])}; "
                       f"stderr {run.stderr_tail[-600:]!r}")  # fmt: skip
        run.proc.kill()
        await run.proc.wait()
    finally:
        soak.live.discard(run.proc)
        for task in helpers:
            task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    await asyncio.gather(*helpers, return_exceptions=True)
    if run.second_owner is not None:
        await asyncio.gather(run.second_owner, return_exceptions=True)
    code = run.proc.returncode
    ledger.exit_codes[str(code)] += 1
    ledger.bridge_peak_rss_mib.append(round(run.peak_rss_mib, 1))
    if soak.interrupted:  # the soak's own stop signalled it, at any moment
        ledger.counts["runs stopped by the soak's interruption"] += 1
    elif code is not None and -code in _SENT.get(fault, ()):
        # Died of the very signal it was sent: in the moments before the run's handlers are
        # installed, or after they are removed at exit, or a second SIGINT "stopping at once".
        ledger.counts[f"runs that died of the {fault} sent (exit {code})"] += 1
    elif code not in (0, 3, 4, 130, -signal.SIGKILL) or (code == 3 and not run.agents):
        ledger.violate(f"run exited {code}: {' '.join(run.argv[-8:])}; "
                       f"stderr {run.stderr_tail[-800:]!r}")  # fmt: skip
    await _agents_gone(run, ledger, killed=code == -signal.SIGKILL)
    return run


async def _agents_gone(run: Run, ledger: Ledger, *, killed: bool) -> None:
    """After the bridge exits its agents are gone: at once (bounded shutdown), or, for a
    SIGKILLed bridge, once they see EOF."""
    alive = [p for p in run.agents if _alive(p)]
    if not alive:
        return
    _, still = await asyncio.to_thread(psutil.wait_procs, alive, EXIT_WAIT_S)
    for proc in still:
        try:
            what = f"pid {proc.pid} ({proc.status()}, {' '.join(proc.cmdline()[3:5])})"
            proc.kill()
        except psutil.Error:
            what = f"pid {proc.pid}"
        if killed:
            # README, "Known limit": nothing runs after SIGKILL; the agent sees EOF and
            # normally exits, but that is up to the agent.
            ledger.notes.append(
                f"agent {what} still running {EXIT_WAIT_S:.0f} s after its bridge was "
                "SIGKILLed (known limit; killed by the soak)"
            )
        else:
            code = run.proc.returncode if run.proc else "?"
            ledger.violate(f"orphan: agent {what} outlived its bridge (exit {code})")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _failed_recoverable(store: Path, conversation: str) -> list[int]:
    """What ``--retry-failed`` will send again: the failed recoverable messages, and the ones
    left ``running`` by a SIGKILLed bridge (the run recovers them as failed recoverable first)."""
    if not store.exists():
        return []
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT seq FROM messages WHERE conversation_id = ? AND (state = 'running'"
            " OR state = 'failed' AND recoverable = 1)", (conversation,),
        ).fetchall()  # fmt: skip
    finally:
        conn.close()
    return [seq for (seq,) in rows]


async def drain(soak: Soak, conversation: str, rng: random.Random) -> None:
    """Runs with one new message each (it un-pauses a stopped queue) until every message of the
    conversation is final; three tries, no faults."""
    for _ in range(3):
        if conversation not in not_final(soak.store):
            return
        soak.ledger.counts["drain runs"] += 1
        # --turn-timeout: a queued stubborn "hang" is cancelled (then quarantined) in bounded time.
        args = ["--conversation", conversation, "--max-restarts", "50", "--turn-timeout", "10",
                "-m", f"echo {soak.tag('D')}"]  # fmt: skip
        await bridge_run(soak, args, None, "none", rng)
    left = not_final(soak.store).get(conversation)
    if left:
        soak.ledger.violate(f"conversation {conversation[:8]}: {left} not final after 3 drain runs")


async def worker(soak: Soak, index: int, profile: str) -> None:
    rng = random.Random(soak.seed * 1000 + index)
    script, programs, turn_timeout = PROFILES[profile]
    lineage = 0
    while not soak.over():
        lineage += 1
        history = soak.workdir / f"history-{index}-{lineage}.json"
        agent = [sys.executable, "-u", str(soak.soak_agent), str(soak.prompt_log), *script,
                 "--history", str(history)]  # fmt: skip
        common = ["--turn-timeout", str(turn_timeout),
                  "--max-restarts", str(rng.choice((3, 5, 50)))]  # fmt: skip
        conversation: str | None = None
        for _n in range(rng.randint(2, 6)):
            if soak.over():
                break
            texts = [pick(rng, programs).format(t=soak.tag("Q")) for _ in range(rng.randint(1, 4))]
            via_stdin = rng.random() < 0.3
            fault = pick(rng, FAULTS)
            if profile == "stubborn" and fault == "SIGKILL bridge":
                fault = (
                    "SIGKILL agent"  # a lingering agent outlives a SIGKILLed bridge (known limit)
                )
            args = list(common)
            by_resume = conversation is not None and rng.random() < 0.5
            if conversation is not None:
                # --resume finds it by cwd and agent command (each lineage's agent argv names
                # its own history file, so the latest one is ours); else by its id.
                args += ["--resume"] if by_resume else ["--conversation", conversation]
                if rng.random() < 0.25:
                    args.append("--retry-failed")
                    for seq in _failed_recoverable(soak.store, conversation):
                        soak.ledger.asked_retries[(conversation, seq)] += 1
            if not via_stdin:
                args += [a for text in texts for a in ("-m", text)]
            args += ["--", *agent] if conversation is None or by_resume else []
            run = await bridge_run(soak, args, texts if via_stdin else None, fault, rng)
            soak.ledger.counts["messages sent"] += len(texts)
            soak.ledger.counts["runs with --resume" if by_resume else "runs new or by id"] += 1
            if by_resume and run.conversation not in (None, conversation):
                soak.ledger.violate(f"--resume continued {run.conversation}, not {conversation}")
            conversation = conversation or run.conversation
            if conversation is None:
                break  # killed before it said which conversation: the final sweep drains it
        if conversation is not None:
            await drain(soak, conversation, rng)
        soak.ledger.counts[f"conversations ({profile})"] += 1
        await asyncio.sleep(0)
