#!/usr/bin/env python
"""Proxy overhead: ``acp-bridge proxy`` against a direct pipe to the same agent, in the same run.

* **Throughput**: one turn of 10,000 ``agent_message_chunk`` updates (the fixture echo agent's
  ``flood 10000``), from sending the prompt to reading its answer, with a client that splits
  lines and parses every message (as an editor does). Budget: the proxy >= 0.9x the direct pipe.
* **Latency**: sequential round trips of a small request (``session/list``), direct and proxied
  in alternating batches of 100; the median added by the proxy. Budget: < 0.5 ms.
* **RSS** of the proxy process after the runs (the agent not included).

The direct and the proxied connection stay open and take turns (after one warm-up turn
each), so a change in the machine's load hits both alike; medians are reported. Prints a
Markdown table; ``--json`` prints the figures instead. It does not edit docs/benchmarks.md.

    python -m scripts.bench.proxy [--turns 7] [--round-trips 2000] [--chunks 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil

from scripts import common
from scripts.common import ROOT

AGENT = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
PROXY = [sys.executable, "-m", "acp_bridge", "proxy", "--"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = measure(args.turns, args.chunks, args.round_trips)
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


if __name__ == "__main__":
    main()
