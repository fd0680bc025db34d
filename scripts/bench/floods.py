"""Benchmark: the bridge's own memory under the floods of issue 7.

Each measurement runs in a fresh Python process (so RSS baselines never mix), which reports the
RSS of that process (the bridge, not the agent) sampled every 50 ms by a thread while the flood
passes: at the start of the flood, its peak, at its end. The floods, each against a stdlib fake
agent from ``fixtures/agents/``, on asyncio and on trio:

1. **permission requests** -- ``request_flood_agent.py`` sends 200,000
   ``session/request_permission`` requests to a supervised agent (``open_supervised_agent``,
   default options: the policy denies). The peer serves at most ``max_requests_in_flight``
   (128) at once; past that its reader stops reading the agent. The most requests in flight
   seen (``JsonRpcPeer.requests_in_flight``, sampled on every line in and out) and the agent's
   own tally (every id answered once, with a result) are checked.
2. **unknown requests** -- the same with 200,000 ``_x/flood`` requests, each answered -32601.
3. **update flood** -- one turn of 1,000,000 ``agent_message_chunk`` updates (prompt
   ``flood 1000000`` to ``echo_agent.py``) read through a ``Conversation`` (a ``QueueStore`` in a
   temporary file) by its primary subscriber, once by a reader that keeps up and once by a slow
   reader (1 ms asleep every 1,000 events). The primary subscriber's queue holds 256 events and
   then applies backpressure (the turn stops reading the agent). Every chunk is checked to
   arrive, in order.

The flood agent speaks no ACP handshake (it floods at once), so it is started behind a few
lines of ``python -c`` that answer ``initialize`` and ``session/new`` (session ``sess-flood``,
the one its requests name) and then ``exec`` the unchanged agent; the flood thus starts once
the session is open, and the RSS baseline is taken just before.

Run ``python -m scripts.bench.floods`` (``--quick`` for a tenth of every flood, ``--runs N``,
``--write docs/benchmarks.md`` to record the results in its section). Progress goes to stderr,
the table to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scripts.common import ROOT, code_version, machine, module_command, write_section

AGENTS = ROOT / "fixtures" / "agents"

BACKENDS = ("asyncio", "trio")
REQUESTS = 200_000
UPDATES = 1_000_000
SAMPLE_INTERVAL_S = 0.05
FLAT_MIB = 20.0
SLOW_EVERY = 1000
SLOW_SLEEP_S = 0.001
CHILD_TIMEOUT_S = 900.0
MIB = 2**20

FLOODS = {
    "permission": ("permission requests", "session/request_permission"),
    "unknown": ("unknown requests", "_x/flood"),
    "updates-fast": ("updates, reader keeps up", None),
    "updates-slow": ("updates, slow reader", None),
}

# Answers initialize and session/new, then becomes the flood agent (same pid, same pipes). It
# reads stdin a byte at a time so that nothing past the second line is consumed before exec.
HANDSHAKE = r"""
import json, os, sys

def read_message():
    data = bytearray()
    while not data.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte:
            sys.exit(0)
        data += byte
    return json.loads(data)

def answer(request, result):
    line = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\n"
    view = memoryview(line.encode())
    while view:
        view = view[os.write(1, view):]

answer(read_message(), {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []})
answer(read_message(), {"sessionId": "sess-flood"})
os.execv(sys.executable, [sys.executable, "-u", *sys.argv[1:]])
"""


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- inside a measuring process ----------------------------------------------------------------


class RssSampler:
    """This process's RSS: at the start, every ``interval_s`` in a thread (so a busy event
    loop cannot delay a sample), and at the end."""

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self.start = self.peak = self.end = 0
        self.samples = 0

    def _rss(self) -> int:
        rss: int = self._process.memory_info().rss
        return rss

    def _sample(self) -> None:
        # Deadlines, not fixed sleeps: waking up and reading /proc waits for the GIL, which a
        # busy event loop holds for up to a switch interval at a time; that delay must not add
        # up from one sample to the next.
        deadline = time.monotonic()
        while True:
            deadline = max(deadline + self._interval_s, time.monotonic())
            if self._stop.wait(deadline - time.monotonic()):
                return
            self.peak = max(self.peak, self._rss())
            self.samples += 1

    def __enter__(self) -> RssSampler:
        self.start = self.peak = self._rss()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.end = self._rss()
        self.peak = max(self.peak, self.end)


@dataclass
class Measured:
    flood: str
    backend: str
    items: int
    seconds: float
    rss_start: int
    rss_peak: int
    rss_end: int
    samples: int
    most_in_flight: int | None = None
    check: str = "ok"


def measured(flood: str, backend: str, items: int, seconds: float, rss: RssSampler) -> Measured:
    return Measured(flood, backend, items, seconds, rss.start, rss.peak, rss.end, rss.samples)


def request_flood(flood: str, backend: str, count: int) -> Measured:
    """``count`` requests from the flood agent, served by a supervised agent's handlers."""
    import anyio

    from acp_bridge import AgentSpec, ClientOptions, open_supervised_agent

    method = FLOODS[flood][1]
    assert method is not None
    flood_agent = [str(AGENTS / "request_flood_agent.py"), "--count", str(count)]
    argv = [sys.executable, "-u", "-c", HANDSHAKE, *flood_agent, "--method", method]

    async def run() -> Measured:
        spec = AgentSpec(argv, name="request-flood-agent")
        with tempfile.TemporaryDirectory() as workdir:
            async with open_supervised_agent(spec, ClientOptions()) as agent:
                peer = agent.connection.peer
                most = 0
                tally: dict[str, Any] = {}
                done = anyio.Event()

                def watch(direction: str, line: bytes) -> None:
                    nonlocal most
                    most = max(most, peer.requests_in_flight)

                def finished(params: Any) -> None:
                    tally.update(params)
                    done.set()

                peer.add_observer(watch)
                peer.on_notification("_flood/done", finished)
                with RssSampler() as rss:
                    started = time.perf_counter()
                    await agent.new_session(Path(workdir))  # its answer starts the flood
                    with anyio.fail_after(CHILD_TIMEOUT_S):
                        await done.wait()
                    seconds = time.perf_counter() - started
                result = measured(flood, backend, count, seconds, rss)
                result.most_in_flight = most
                result.check = check_tally(flood, count, tally)
                return result

    return anyio.run(run, backend=backend)


def check_tally(flood: str, count: int, tally: dict[str, Any]) -> str:
    """"ok" when the agent saw every request answered once, as the flood expects."""
    expected: dict[str, Any] = {"sent": count, "answered": count, "duplicates": 0, "unknown": 0}
    if flood == "permission":
        expected |= {"results": count, "errors": {}}
    else:
        expected |= {"results": 0, "errors": {"-32601": count}}
    wrong = {key: tally.get(key) for key, value in expected.items() if tally.get(key) != value}
    return "ok" if not wrong else f"unexpected tally {wrong} (expected {expected})"


def update_flood(flood: str, backend: str, count: int) -> Measured:
    """One turn of ``count`` chunks read through a conversation's primary subscriber."""
    import anyio

    from acp_bridge import AgentSpec, ClientOptions, open_supervised_agent
    from acp_bridge.conversation.opening import open_conversation
    from acp_bridge.conversation.store import QueueStore

    slow = flood == "updates-slow"
    spec = AgentSpec([sys.executable, "-u", str(AGENTS / "echo_agent.py")], name="echo")

    async def run(workdir: Path) -> Measured:
        store = QueueStore.open(workdir / "queue.db")
        try:
            record = store.create_conversation(agent={}, cwd=str(workdir), now=time.time())
            async with (
                open_supervised_agent(spec, ClientOptions()) as agent,
                open_conversation(store, agent, record) as conversation,
            ):
                events = conversation.subscribe()  # the first one: primary, lossless
                received = wrong = 0
                ended: dict[str, Any] = {}
                with RssSampler() as rss:
                    started = time.perf_counter()
                    await conversation.send(f"flood {count}")
                    with anyio.fail_after(CHILD_TIMEOUT_S), events:
                        async for event in events:
                            kind = event["event"]
                            if kind == "update":
                                text = event["update"]["content"]["text"]
                                if text != f"flood-1-{received} ":
                                    wrong += 1
                                received += 1
                                if slow and received % SLOW_EVERY == 0:
                                    await anyio.sleep(SLOW_SLEEP_S)
                            elif kind == "turn_ended":
                                ended = event
                                break
                    seconds = time.perf_counter() - started
                result = measured(flood, backend, count, seconds, rss)
                if received != count or wrong:
                    result.check = f"{received:,} updates, {wrong:,} out of order"
                elif not ended:
                    result.check = "no turn_ended"
                return result
        finally:
            store.close()

    with tempfile.TemporaryDirectory() as workdir:
        return anyio.run(run, Path(workdir), backend=backend)


def child(flood: str, backend: str, items: int) -> None:
    if flood in ("permission", "unknown"):
        result = request_flood(flood, backend, items)
    else:
        result = update_flood(flood, backend, items)
    print(json.dumps(asdict(result)), flush=True)


# -- the orchestrating process -----------------------------------------------------------------


def measure_once(flood: str, backend: str, items: int) -> Measured:
    command = module_command("scripts.bench.floods", "--child", flood)
    command += ["--backend", backend, "--items", str(items)]
    done = subprocess.run(
        command, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT_S + 60, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{flood}/{backend}: the measuring process failed ({done.returncode})")
    return Measured(**json.loads(lines[-1]))


def items_for(flood: str, quick: bool) -> int:
    items = REQUESTS if flood in ("permission", "unknown") else UPDATES
    return items // 10 if quick else items


Results = dict[tuple[str, str], list[Measured]]
"""The runs of each (flood, backend), in the order measured."""


def run_all(runs: int, quick: bool, backends: tuple[str, ...]) -> Results:
    results: Results = {}
    for flood in FLOODS:
        items = items_for(flood, quick)
        for backend in backends:
            for run in range(runs):
                result = measure_once(flood, backend, items)
                results.setdefault((flood, backend), []).append(result)
                in_flight = (
                    f", at most {result.most_in_flight} in flight"
                    if result.most_in_flight is not None
                    else ""
                )
                progress(
                    f"{flood}/{backend} run {run + 1}/{runs}: {items:,} in {result.seconds:.2f} s, "
                    f"RSS {result.rss_start / MIB:.1f} -> peak {result.rss_peak / MIB:.1f} -> "
                    f"{result.rss_end / MIB:.1f} MiB ({result.samples} samples){in_flight}; "
                    f"{result.check}"
                )
    return results


def table(results: Results, runs: int, quick: bool) -> str:
    def median(values: list[float]) -> float:
        return statistics.median(values)

    lines = [
        "| flood | backend | items | time (s) | items/s | RSS start (MiB) | RSS peak (MiB) "
        "| RSS end (MiB) | peak growth (MiB) | flat? | most in flight | all answered? |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|--:|---|",
    ]
    for (flood, backend), measured_runs in results.items():
        seconds = median([m.seconds for m in measured_runs])
        items = measured_runs[0].items
        start = median([m.rss_start / MIB for m in measured_runs])
        peak = median([m.rss_peak / MIB for m in measured_runs])
        end = median([m.rss_end / MIB for m in measured_runs])
        growth = median([(m.rss_peak - m.rss_start) / MIB for m in measured_runs])
        in_flight = [m.most_in_flight for m in measured_runs if m.most_in_flight is not None]
        checks = {m.check for m in measured_runs}
        lines.append(
            f"| {FLOODS[flood][0]} | {backend} | {items:,} | {seconds:.2f} | "
            f"{items / seconds:,.0f} | {start:.1f} | {peak:.1f} | {end:.1f} | {growth:.1f} | "
            f"{'yes' if growth < FLAT_MIB else 'no'} | "
            f"{max(in_flight) if in_flight else '–'} | "
            f"{'yes' if checks == {'ok'} else '; '.join(sorted(checks - {'ok'}))} |"
        )
    header = (
        f"Machine: {machine()}\n\n"
        f"Code: acp-bridge at {code_version()}.\n\n"
        f"Date: {datetime.date.today().isoformat()}. Medians of {runs} run(s), each in a fresh "
        f"process{' (--quick: a tenth of every flood)' if quick else ''}; RSS of the bridge's "
        f"process sampled every {SAMPLE_INTERVAL_S * 1000:.0f} ms; \"flat?\" is yes when the "
        f"peak grew less than {FLAT_MIB:.0f} MiB over the start. \"most in flight\" is the "
        f"highest of the runs; \"all answered?\" means every request was answered once (the "
        f"agent's tally) or every update arrived in order.\n"
    )
    return header + "\n" + "\n".join(lines) + "\n"


INTRO = """\
## Floods and memory (`scripts/bench/floods.py`)

```sh
python -m scripts.bench.floods --write docs/benchmarks.md
```

What is measured is the bridge's own memory: the RSS of the process running the bridge (each
measurement in a fresh process, sampled every 50 ms by a thread) at the start of a flood, at
its peak and at its end, on asyncio and trio. Before issue 7, 200,000 permission requests took
the bridge to 3.26 GB (one task per request) and a 1,000,000-update flood through a
conversation to 1.1 GB (unbounded subscriber queues).

- **permission requests**: `request_flood_agent.py` sends 200,000 `session/request_permission`
  requests to a supervised agent (`open_supervised_agent`, default options: the policy
  denies). The bound: a `JsonRpcPeer` serves at most 128 requests at once
  (`max_requests_in_flight`); past it, its reader stops reading the agent, whose pipe fills and
  whose writes wait. "most in flight" is the highest `requests_in_flight` seen on any line in
  or out; the agent's own tally says every request was answered once. The flood agent speaks no
  handshake, so a few lines of `python -c` answer `initialize` and `session/new` and then
  `exec` it unchanged.
- **unknown requests**: the same with 200,000 `_x/flood` requests, each answered -32601 under
  the same bound.
- **updates**: one turn of 1,000,000 `agent_message_chunk` updates (`echo_agent.py`, prompt
  `flood 1000000`) read through a `Conversation` (its `QueueStore` in a temporary file) by its
  primary subscriber, once by a reader that keeps up and once by a slow one (1 ms asleep every
  1,000 events). The bound: the primary subscriber's queue holds 256 events and then applies
  backpressure (the turn stops reading the agent, the agent's pipe fills, the agent waits);
  nothing piles up and nothing is lost (every chunk is checked, in order).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--quick", action="store_true", help="a tenth of every flood")
    parser.add_argument("--backend", choices=BACKENDS, action="append", help="default: both")
    parser.add_argument("--write", type=Path, help="write the section of this markdown file")
    parser.add_argument("--child", choices=tuple(FLOODS), help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, (args.backend or ["asyncio"])[0], args.items)
        return
    started = time.monotonic()
    backends = tuple(args.backend or BACKENDS)
    results = run_all(args.runs, args.quick, backends)
    text = table(results, args.runs, args.quick)
    print(text)
    if args.write:
        write_section(args.write, "bench_floods", text, INTRO)
        progress(f"wrote {args.write}")
    progress(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
