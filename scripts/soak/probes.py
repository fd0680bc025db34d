"""Deterministic probes the soak runs once, beside its random load.

:func:`startup_probe`: a signal that reaches ``acp-bridge run`` (or ``proxy``) as soon as its
agent process exists, i.e. during the bridge's own start-up. The promise (README, exit codes;
docs/proxy.md, shutdown) is the same as later: ``run`` exits 130, ``proxy`` exits 0, and the
agent's tree is stopped. The agent is the stubborn fixture with ``--linger``, which does not exit
on stdin EOF, so an agent nobody stopped shows up as a survivor.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import psutil

from scripts.soak.checks import Verdict
from scripts.soak.state import Soak

PROBES = [("run", signal.SIGTERM), ("run", signal.SIGINT), ("run", signal.SIGHUP),
          ("proxy", signal.SIGTERM)]  # fmt: skip
EXPECTED = {"run": 130, "proxy": 0}


async def _agent_child(pid: int, limit_s: float = 20.0) -> psutil.Process | None:
    """The bridge's first child, polled every 5 ms (the probe wants the earliest moment)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while loop.time() < end:
        try:
            children = psutil.Process(pid).children()
        except psutil.Error:
            return None
        if children:
            return children[0]
        await asyncio.sleep(0.005)
    return None


async def one_probe(soak: Soak, command: str, signum: signal.Signals) -> str | None:
    """None when the promise held, else what happened."""
    agent = [sys.executable, "-u", str(soak.soak_agent), str(soak.prompt_log),
             "stubborn_agent.py", "--quiet"]  # fmt: skip
    if command == "run":
        argv = soak.run_argv(["-m", f"echo {soak.tag('Q')}", "--", *agent])
    else:
        argv = [sys.executable, "-m", "acp_bridge", "proxy", "--", *agent]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env=soak.env, cwd=soak.workdir, start_new_session=True,
    )  # fmt: skip
    soak.live.add(proc)
    try:
        child = await _agent_child(proc.pid)
        proc.send_signal(signum)
        try:
            code = await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return f"{command}: still running 30 s after {signum.name}"
    finally:
        soak.live.discard(proc)
        if proc.stdin is not None:
            proc.stdin.close()
    problems = []
    if code != EXPECTED[command]:
        problems.append(f"exit {code} (expected {EXPECTED[command]})")
    if child is not None:
        _, alive = await asyncio.to_thread(psutil.wait_procs, [child], 5)
        if alive:
            problems.append(f"its agent pid {child.pid} survived it (killed by the soak)")
            for survivor in alive:
                survivor.kill()
    if not problems:
        return None
    return f"{command} got {signum.name} as soon as its agent existed: " + ", ".join(problems)


async def startup_probe(soak: Soak) -> Verdict:
    evidence = []
    for command, signum in PROBES:
        if soak.over():
            break
        problem = await one_probe(soak, command, signum)
        if soak.interrupted:  # the soak's own stop may have signalled it first
            break
        soak.ledger.counts["start-up probes"] += 1
        if problem:
            evidence.append(problem)
    name = "a signal during start-up stops the bridge and its agent"
    summary = (
        f"{len(PROBES)} probes (run: SIGTERM, SIGINT, SIGHUP; proxy: SIGTERM), "
        f"{len(evidence)} failed"
    )
    return Verdict(name, not evidence, summary, evidence)
