#!/usr/bin/env python
"""Proxy overhead: ``acp-bridge proxy`` against a direct pipe to the same agent, in the same run.

* **Throughput**: one turn of 10,000 ``agent_message_chunk`` updates (the fixture echo agent's
  ``flood 10000``), from sending the prompt to reading its answer, with a client that splits
  lines and parses every message (as an editor does). Budget: the proxy >= 0.9x the direct pipe.
* **Latency**: sequential round trips of a small request (``session/list``), direct and proxied
  in alternating batches of 100; the median added by the proxy. Budget: < 0.5 ms.
* **RSS** of the proxy process after the runs (the agent not included).
* **RSS under floods** (issue 20): the scripted hostile editor
  (``fixtures/editors/hostile_editor.py``) against the proxy and the echo agent. An editor that
  stops reading after the handshake while the agent writes 60 updates of 16 MiB; an agent that
  stops reading (``deaf``) while the editor writes 40 messages of 16 MiB. Each waits until the
  flood is stuck at the proxy's bound (the pipes of the side that stopped reading full, the
  proxy's own pipe to it too, the proxy asleep), then reads the proxy's RSS and its peak
  (``VmHWM``, the flood so far included). Budget (design.md): under 200 MB. Then the editor
  reads again and every update is checked to arrive (the stopped agent's flood ends with a
  SIGTERM, which must stop the proxy, exit 0).

The direct and the proxied connection stay open and take turns (after one warm-up turn
each), so a change in the machine's load hits both alike; medians are reported. Prints a
Markdown table; ``--json`` prints the figures instead. It does not edit docs/benchmarks.md.

    python -m scripts.bench.proxy [--turns 7] [--round-trips 2000] [--chunks 10000] [--no-floods]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil

from scripts import common
from scripts.bench import pipes
from scripts.common import ROOT

AGENT = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
PROXY = [sys.executable, "-m", "acp_bridge", "proxy", "--"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HOSTILE_EDITOR = [sys.executable, "-u", str(ROOT / "fixtures" / "editors" / "hostile_editor.py")]
HUGE = 16 * 1024 * 1024
RSS_BUDGET_MB = 200
STUCK_WAIT_S = 120.0


class Client:
    """A stdlib NDJSON client over a child's pipes: blocking reads, every line parsed."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV, cwd=ROOT, bufsize=0
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in = self.process.stdin
        self._out = self.process.stdout.fileno()
        self._buffer = b""
        self._lines: list[bytes] = []
        self._next = 0

    def send(self, message: dict[str, Any]) -> None:
        self._in.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def read(self) -> dict[str, Any]:
        while not self._lines:
            chunk = os.read(self._out, 1 << 18)
            if not chunk:
                raise EOFError
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            self._lines = lines[::-1]
        message: dict[str, Any] = json.loads(self._lines.pop())
        return message

    def call(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The response, and how many messages came before it."""
        request_id = self._next
        self._next += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        before = 0
        while True:
            message = self.read()
            if message.get("id") == request_id and "method" not in message:
                return message, before
            before += 1

    def handshake(self) -> str:
        self.call("initialize", {"protocolVersion": 1})
        new, _ = self.call("session/new", {"cwd": str(ROOT), "mcpServers": []})
        session_id: str = new["result"]["sessionId"]
        return session_id

    def close(self) -> None:
        self._in.close()
        self.process.wait(timeout=30)


def flood_turns(clients: dict[str, Client], chunks: int, turns: int) -> dict[str, list[float]]:
    """Each client's flood turn durations, the clients taking turns (one warm-up each first),
    so a change in the machine's load hits both alike."""
    sessions = {name: client.handshake() for name, client in clients.items()}
    times: dict[str, list[float]] = {name: [] for name in clients}
    for index in range(turns + 1):
        for name, client in clients.items():
            text = f"flood {chunks}"
            prompt = {"sessionId": sessions[name], "prompt": [{"type": "text", "text": text}]}
            started = time.perf_counter()
            answer, updates = client.call("session/prompt", prompt)
            elapsed = time.perf_counter() - started
            assert answer["result"]["stopReason"] == "end_turn" and updates == chunks, answer
            if index:
                times[name].append(elapsed)
    return times


def round_trips(clients: dict[str, Client], count: int, batch: int = 100) -> dict[str, list[float]]:
    """Each client's round-trip times, in alternating batches of ``batch`` (as the turns)."""
    for client in clients.values():
        client.handshake()
    times: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(max(1, count // batch)):
        for name, client in clients.items():
            for _ in range(batch):
                started = time.perf_counter()
                client.call("session/list", {})
                times[name].append(time.perf_counter() - started)
    return times


def measure(turns: int, chunks: int, round_trips_count: int) -> dict[str, Any]:
    """The proxy's figures: flood turns and round trips, direct and proxied taking turns.

    Also returns the per-turn and per-round-trip samples (``*_samples``), for a caller that
    keeps raw results."""
    clients = {"direct": Client(AGENT), "proxy": Client(PROXY + AGENT)}
    try:
        times = flood_turns(clients, chunks, turns)
        rss = psutil.Process(clients["proxy"].process.pid).memory_info().rss
    finally:
        for client in clients.values():
            client.close()
    direct_s, proxy_s = times["direct"], times["proxy"]
    clients = {"direct": Client(AGENT), "proxy": Client(PROXY + AGENT)}
    try:
        trips = round_trips(clients, round_trips_count)
    finally:
        for client in clients.values():
            client.close()
    direct_rt, proxy_rt = trips["direct"], trips["proxy"]
    direct_rate = chunks / statistics.median(direct_s)
    proxy_rate = chunks / statistics.median(proxy_s)
    return {
        "chunks": chunks,
        "turns": turns,
        "round_trips": round_trips_count,
        "direct_updates_per_s": round(direct_rate),
        "proxy_updates_per_s": round(proxy_rate),
        "throughput_ratio": round(proxy_rate / direct_rate, 3),
        "direct_round_trip_median_ms": round(statistics.median(direct_rt) * 1000, 3),
        "proxy_round_trip_median_ms": round(statistics.median(proxy_rt) * 1000, 3),
        "added_latency_median_ms": round(
            (statistics.median(proxy_rt) - statistics.median(direct_rt)) * 1000, 3
        ),
        "proxy_rss_mib": round(rss / 2**20, 1),
        "direct_turn_samples_s": direct_s,
        "proxy_turn_samples_s": proxy_s,
    }


class HostileRun:
    """The hostile editor running ``steps`` against the proxy and the echo agent."""

    def __init__(self, steps: list[str]) -> None:
        argv = list(HOSTILE_EDITOR)
        for step in steps:
            argv += ["--step", step]
        self.process = subprocess.Popen(
            [*argv, "--", *PROXY, *AGENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._report = self.process.stdout
        self.proxy_pid = int(self.event("started")["pid"])

    def event(self, name: str) -> dict[str, Any]:
        while True:
            line = self._report.readline()
            if not line:
                raise RuntimeError(f"the hostile editor ended before {name!r}")
            event: dict[str, Any] = json.loads(line)
            if event["event"] == "gave_up":
                raise RuntimeError(f"the hostile editor gave up: {event}")
            if event["event"] == name:
                return event

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()

    def agent_pid(self) -> int:
        deadline = time.monotonic() + STUCK_WAIT_S
        while not (children := psutil.Process(self.proxy_pid).children()):
            if time.monotonic() > deadline:
                raise RuntimeError("the proxy started no agent")
            time.sleep(0.02)
        return int(children[0].pid)

    def wait_stuck(self, *full_pipes: tuple[int, int]) -> dict[str, float]:
        """Until the pipes are full and the proxy sleeps; then its RSS and peak, in MiB."""
        started = time.monotonic()
        while not (
            all(pipes.pipe_is_full(pid, fd) for pid, fd in full_pipes)
            and pipes.is_asleep(self.proxy_pid)
        ):
            if time.monotonic() - started > STUCK_WAIT_S:
                raise RuntimeError("the flood never got stuck at the proxy's bound")
            time.sleep(0.02)
        rss = psutil.Process(self.proxy_pid).memory_info().rss
        return {
            "rss_mib": round(rss / 2**20, 1),
            "peak_mib": round(pipes.peak_rss_bytes(self.proxy_pid) / 2**20, 1),
        }

    def finish(self) -> dict[str, Any]:
        """The editor's last event (``done``) once it ended; its exit status is checked."""
        done = self.event("done")
        if self.process.wait(timeout=STUCK_WAIT_S) != 0:
            raise RuntimeError(f"the hostile editor failed ({self.process.returncode})")
        return done

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proxy_pid, signal.SIGTERM)
            self.process.kill()
            self.process.wait()


def flood_from_the_agent(updates: int, size: int = HUGE) -> dict[str, Any]:
    """An editor that stops reading while the agent writes ``updates`` updates of ``size``."""
    program = "; ".join([f"huge {size}"] * updates)
    steps = ["handshake", "stop-reading", f"prompt {program}", "sync"]
    run = HostileRun([*steps, "read-again", "wait-answer", "sync", "close"])
    try:
        run.event("sync")
        figures = run.wait_stuck((run.proxy_pid, 1), (run.agent_pid(), 1))
        run.release()
        answer = run.event("answer")
        run.event("sync")
        figures["peak_after_drain_mib"] = round(pipes.peak_rss_bytes(run.proxy_pid) / 2**20, 1)
        run.release()
        code = run.event("exited")["code"]
        done = run.finish()
    finally:
        run.close()
    if answer.get("result") != {"stopReason": "end_turn"} or done["updates"] != updates:
        raise RuntimeError(f"the flood did not arrive whole: {answer}, {done}")
    if code != 0:
        raise RuntimeError(f"the proxy exited {code}")
    return figures


def flood_from_the_editor(messages: int, size: int = HUGE) -> dict[str, Any]:
    """An agent that stops reading while the editor writes ``messages`` messages of ``size``."""
    steps = ["handshake", "prompt deaf; wait 600", f"flood {messages} {size} notify", "close"]
    run = HostileRun(steps)
    try:
        run.event("flooding")
        figures = run.wait_stuck((run.proxy_pid, 0), (run.agent_pid(), 0))
        os.kill(run.proxy_pid, signal.SIGTERM)
        figures["sent_before_stuck"] = run.event("flooded")["count"]
        code = run.event("exited")["code"]
        run.finish()
    finally:
        run.close()
    if code != 0:
        raise RuntimeError(f"the proxy exited {code} after SIGTERM")
    return figures


def measure_floods(agent_updates: int = 60, editor_messages: int = 40) -> dict[str, Any]:
    """The proxy's memory under the two floods of issue 20 (16 MiB lines)."""
    return {
        "editor_stops_reading": {"updates": agent_updates, **flood_from_the_agent(agent_updates)},
        "agent_stops_reading": {
            "messages": editor_messages,
            **flood_from_the_editor(editor_messages),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-floods", action="store_true", help="skip the RSS under floods")
    args = parser.parse_args()
    figures = measure(args.turns, args.chunks, args.round_trips)
    if not args.no_floods:
        figures["floods"] = measure_floods()
    if args.json:
        print(json.dumps(figures))
        return
    ratio_ok = "yes" if figures["throughput_ratio"] >= 0.9 else "NO"
    latency_ok = "yes" if figures["added_latency_median_ms"] < 0.5 else "NO"
    print(f"Machine: {common.machine()}")
    print(f"Code: {common.code_version()}; load average {os.getloadavg()[0]:.1f}\n")
    print("| measure | direct pipe | through acp-bridge proxy | budget | met |")
    print("|---|---|---|---|---|")
    print(
        f"| {args.chunks:,}-chunk turn (median of {args.turns}) | "
        f"{figures['direct_updates_per_s']:,} updates/s | {figures['proxy_updates_per_s']:,} "
        f"updates/s ({figures['throughput_ratio']}x) | >= 0.9x | {ratio_ok} |"
    )
    print(
        f"| round trip, session/list (median of {args.round_trips}) | "
        f"{figures['direct_round_trip_median_ms']} ms | {figures['proxy_round_trip_median_ms']} ms "
        f"(+{figures['added_latency_median_ms']} ms) | < +0.5 ms | {latency_ok} |"
    )
    print(f"| proxy RSS after the turns | - | {figures['proxy_rss_mib']} MiB | - | - |")
    floods = figures.get("floods")
    if floods is None:
        return
    editor, agent = floods["editor_stops_reading"], floods["agent_stops_reading"]
    rows = [
        (
            f"proxy RSS, editor stops reading, agent writes {editor['updates']} x 16 MiB",
            editor["rss_mib"],
            max(editor["peak_mib"], editor["peak_after_drain_mib"]),
        ),
        (
            f"proxy RSS, agent stops reading, editor writes {agent['messages']} x 16 MiB",
            agent["rss_mib"],
            agent["peak_mib"],
        ),
    ]
    for label, rss, peak in rows:
        met = "yes" if peak * 2**20 < RSS_BUDGET_MB * 10**6 else "NO"
        print(f"| {label} | - | {rss} MiB at the bound, peak {peak} MiB | < 200 MB | {met} |")


if __name__ == "__main__":
    main()
