"""A bounded soak of acp-bridge: everything at once, against real processes, then invariants.

Run ``python scripts/soak.py`` (default 10 minutes; ``--minutes 2`` is the CI run, fractions
allowed; ``--seed N`` picks the same random choices; ``--json FILE`` writes the raw counts).

For the duration, concurrently:

* conversation workers (``scripts/soak/runs.py``): real ``python -m acp_bridge run --json``
  processes on one shared ``--store``, against fixture agents (echo, garbage, stderr flood,
  noisy, stubborn that ignores cancel and SIGTERM), messages from ``-m`` and from stdin,
  programs that flood (``flood``, ``burst``), crash (SIGKILL, SIGTERM, exit codes), write
  garbage and stderr, hang; faults from outside (SIGINT, SIGTERM, a second SIGINT, SIGKILL of
  the bridge then ``--conversation`` again, ``--retry-failed``, SIGKILL/SIGTERM of the agent,
  a second owner);
* an editor (``scripts/soak/editor.py``) driving one long-lived ``acp-bridge proxy`` while its
  agent is killed, with cancels, stubborn turns, queued prompts, floods and permission requests;
* a library loop (``scripts/soak/library.py``, its own process): ``open_supervised_agent`` and
  ``open_conversation`` again and again on asyncio and trio, with crashes, interrupts, stops,
  retries and request floods.

Every agent is ``fixtures/soak/soak_agent.py``, which logs each prompt it receives. At the end,
each conversation is drained and five invariants are checked and printed with their counts:
every message in exactly one final state; no message prompted twice unasked; no orphan
processes; no leaked file descriptors; RSS flat (tolerances in ``scripts/soak/checks.py``).
Exit 0 when all hold, 1 on any violation (with the evidence), 130 when interrupted (Ctrl-C:
everything is stopped, the partial counts printed). Progress goes to stderr every 10 s.
Temporary files live in one directory, removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from scripts.common import module_command
from scripts.soak import checks
from scripts.soak.editor import editor_loop
from scripts.soak.probes import startup_probe
from scripts.soak.runs import drain, worker
from scripts.soak.state import TAG_VAR, Soak

WORKER_PROFILES = ("echo", "garbage", "stubborn", "stderr", "noisy")
"""The profile each run worker takes, in turn (:data:`scripts.soak.runs.PROFILES` has them)."""


async def library_child(soak: Soak, seconds: float) -> None:
    out = soak.workdir / "library.json"
    workdir = soak.workdir / "library"
    workdir.mkdir()
    argv = module_command(
        "scripts.soak.library", "--seconds", f"{seconds:.1f}", "--seed", str(soak.seed),
        "--workdir", str(workdir), "--out", str(out),
    )  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=soak.env, cwd=soak.workdir, start_new_session=True,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    soak.live.add(proc)
    try:
        _, err = await proc.communicate()
    finally:
        soak.live.discard(proc)
    if out.exists():
        soak.ledger.library = json.loads(out.read_text())
    if proc.returncode != 0 and not soak.interrupted:
        soak.ledger.violate(f"library loop exited {proc.returncode}: {err[-1500:]!r}")
    for error in soak.ledger.library.get("errors", []):
        soak.ledger.violate(f"library loop: {error}")
    for tally in soak.ledger.library.get("floods", []):
        if tally.get("answered") != tally.get("sent") or tally.get("duplicates"):
            soak.ledger.violate(f"library request flood: {tally}")


async def probe(soak: Soak) -> None:
    soak.probe = await startup_probe(soak)


async def progress_loop(soak: Soak) -> None:
    while True:
        await asyncio.sleep(10)
        c = soak.ledger.counts
        soak.progress(
            f"runs {c['bridge runs']}  messages {c['messages sent']}  turns "
            f"{sum(soak.ledger.turn_started.values())}  updates {c['update events']}  agent "
            f"exits {c['event agent_exited']}  proxy prompts "
            f"{sum(v for k, v in c.items() if k.startswith('proxy ') and 'stopReason' in k)}"
            f"  proxy RSS {soak.ledger.proxy_rss_mib[-1] if soak.ledger.proxy_rss_mib else '-'} MiB"
            f"  violations {len(soak.ledger.violations)}"
        )


async def stop_everything(soak: Soak) -> None:
    """SIGTERM to every live process the soak started, then SIGKILL after 15 s."""
    for proc in list(soak.live):
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    waits = [p.wait() for p in list(soak.live) if p.returncode is None]
    if waits:
        try:
            await asyncio.wait_for(asyncio.gather(*waits), 15)
        except TimeoutError:
            for proc in list(soak.live):
                if proc.returncode is None:
                    proc.kill()


async def soak_main(soak: Soak, minutes: float) -> None:
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()

    def on_signal() -> None:
        if soak.interrupted:  # a second Ctrl-C: no more waiting
            for proc in checks.tagged_processes(str(soak.workdir), TAG_VAR, soak.tag_value):
                proc.kill()
        soak.interrupted = True
        stopped.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
    soak.progress(f"{minutes} min, seed {soak.seed}, {soak.workers} run workers + proxy editor "
                  f"+ library loop, in {soak.workdir}")  # fmt: skip
    ticker = asyncio.create_task(progress_loop(soak))
    parts = [asyncio.create_task(worker(soak, i, WORKER_PROFILES[i % len(WORKER_PROFILES)]))
             for i in range(soak.workers)]  # fmt: skip
    parts.append(asyncio.create_task(editor_loop(soak)))
    parts.append(asyncio.create_task(probe(soak)))
    parts.append(asyncio.create_task(library_child(soak, minutes * 60)))
    everything: asyncio.Future[list[Any]] = asyncio.gather(*parts, return_exceptions=True)
    interrupt: asyncio.Future[Any] = asyncio.ensure_future(stopped.wait())
    await asyncio.wait([everything, interrupt], return_when=asyncio.FIRST_COMPLETED)
    if soak.interrupted:
        soak.progress("interrupted: stopping everything")
        await stop_everything(soak)
    for result in await everything:
        if isinstance(result, BaseException) and not soak.interrupted:
            soak.ledger.violate(f"a soak part raised {result!r}")
    if not soak.interrupted:
        soak.progress("draining every conversation left unsettled")
        for conversation in checks.not_final(soak.store):
            await drain(soak, conversation, __import__("random").Random(soak.seed))
    ticker.cancel()
    interrupt.cancel()


def report(soak: Soak, fds_before: int, fds_after: int) -> list[checks.Verdict]:
    survivors = checks.tagged_processes(str(soak.workdir), TAG_VAR, soak.tag_value)
    if survivors:  # give exiting processes a moment before calling them orphans
        _, survivors = psutil.wait_procs(survivors, timeout=5)
    verdicts = [
        checks.check_final_states(soak.store, soak.ledger.library),
        checks.check_prompted_once(soak.store, soak.prompt_log, soak.ledger),
        checks.check_orphans(list(survivors), soak.ledger),
        checks.check_fds(fds_before, fds_after, soak.ledger),
        checks.check_rss(soak.ledger),
    ]
    for proc in survivors:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if soak.probe is not None:
        verdicts.append(soak.probe)
    if soak.interrupted:
        verdicts[0].summary += " (interrupted: not drained, partial)"
        verdicts[0].ok = True
    other = [v for v in soak.ledger.violations if not v.startswith("orphan:")]
    name = "no other failures (exit codes, hangs, tracebacks, proxy answers)"
    verdicts.append(checks.Verdict(name, not other, f"{len(other)} seen", other[:20]))
    return verdicts


def print_report(soak: Soak, verdicts: list[checks.Verdict], seconds: float) -> None:
    ledger = soak.ledger
    print(f"acp-bridge soak: {seconds / 60:.2f} min, seed {soak.seed}"
          + (" (INTERRUPTED, partial)" if soak.interrupted else ""))  # fmt: skip
    print("counts:")
    for key, value in sorted(ledger.counts.items()):
        print(f"  {key}: {value}")
    print(
        "  run exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(ledger.exit_codes.items()))
    )
    lib = ledger.library
    print(f"  library loop: {lib.get('rounds', 0)} rounds, {len(lib.get('floods', []))} request "
          f"floods of 20000, {len(lib.get('errors', []))} errors")  # fmt: skip
    for note in ledger.notes:
        print(f"  note: {note}")
    print("invariants:")
    for verdict in verdicts:
        print(f"  [{'ok' if verdict.ok else 'VIOLATED'}] {verdict.name}: {verdict.summary}")
        for line in verdict.evidence:
            print(f"      - {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--workers", type=int, default=3, help="concurrent run conversations")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the raw counts here")
    args = parser.parse_args()
    if args.minutes <= 0 or args.workers < 1:
        parser.error("--minutes must be > 0 and --workers >= 1")
    fds_before = psutil.Process().num_fds()
    soak = Soak(args.minutes, args.seed, args.workers)
    try:
        asyncio.run(soak_main(soak, args.minutes))
        fds_after = psutil.Process().num_fds()
        verdicts = report(soak, fds_before, fds_after)
        seconds = time.monotonic() - soak.started
        print_report(soak, verdicts, seconds)
        if args.json:
            args.json.write_text(json.dumps(raw(soak, verdicts, seconds), indent=1))
    finally:
        for proc in checks.tagged_processes(str(soak.workdir), TAG_VAR, soak.tag_value):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(soak.workdir, ignore_errors=True)
    if soak.interrupted:
        return 130
    return 0 if all(v.ok for v in verdicts) else 1


def raw(soak: Soak, verdicts: list[checks.Verdict], seconds: float) -> dict[str, Any]:
    ledger = soak.ledger
    return {
        "seconds": round(seconds, 1), "seed": soak.seed, "interrupted": soak.interrupted,
        "counts": dict(ledger.counts), "exit_codes": dict(ledger.exit_codes),
        "bridge_peak_rss_mib": ledger.bridge_peak_rss_mib, "proxy_rss_mib": ledger.proxy_rss_mib,
        "proxy_fds": ledger.proxy_fds, "library": ledger.library,
        "invariants": [{"name": v.name, "ok": v.ok, "summary": v.summary, "evidence": v.evidence}
                       for v in verdicts],
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
