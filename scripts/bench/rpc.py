"""Benchmark: the JSON-RPC peer against the official ACP Python SDK, in the same run.

Three measurements, each the median of several runs:

1. **parse** -- framing + JSON parse + envelope classification of 100,000 ``session/update``
   lines held in memory (the upper bound: no pipe, no dispatch).
2. **notifications** -- a stdlib child floods N ``session/update`` notifications on its stdout;
   the parent reads them through a real pipe into a counting handler. Ours: ``JsonRpcPeer`` (on
   asyncio and on trio). Official SDK: ``acp.stdio.spawn_stdio_connection`` with a counting
   handler. The clock runs from the first byte until the N-th handler call.
3. **round trips** -- the parent calls ``echo`` on a child serving it, both sides built with the
   same library: sequential calls, then 32 in flight at once.

Run ``python -m scripts.bench.rpc`` (add ``--write docs/benchmarks.md`` to record the results).
The script re-runs itself as the child processes (``--role flood|serve-ours|serve-sdk``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from scripts.common import machine, module_command, write_section

UPDATE_PARAMS = {
    "sessionId": "sess-0123456789abcdef",
    "update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "The quick brown fox jumps over the lazy dog. "},
    },
}


def _update_line() -> bytes:
    message = {"jsonrpc": "2.0", "method": "session/update", "params": UPDATE_PARAMS}
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


# -- child roles ------------------------------------------------------------------------------


def role_flood(count: int) -> None:
    """Write ``count`` notifications as fast as the pipe takes them, then wait for EOF."""
    line = _update_line()
    batch = line * 1000
    out = sys.stdout.buffer
    for _ in range(count // 1000):
        out.write(batch)
    out.write(line * (count % 1000))
    out.flush()
    sys.stdin.buffer.read()  # hold the pipe open until the reader is done


def role_serve_ours() -> None:
    import anyio

    from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream
    from acp_bridge.rpc.peer import JsonRpcPeer

    async def echo(params: Any) -> Any:
        return params

    async def main() -> None:
        peer = JsonRpcPeer(FdReceiveStream(0), FdSendStream(1), name="client")
        peer.on_request("echo", echo)
        await peer.run()

    anyio.run(main)


def role_serve_sdk() -> None:
    from acp.connection import Connection
    from acp.stdio import stdio_streams

    async def handler(method: str, params: Any, is_notification: bool) -> Any:
        if method == "echo":
            return params
        from acp import RequestError

        raise RequestError.method_not_found(method)

    async def main() -> None:
        reader, writer = await stdio_streams()
        connection = Connection(handler, writer, reader)
        await connection.main_loop()

    asyncio.run(main())


def _child(role: str, *extra: str) -> list[str]:
    return module_command("scripts.bench.rpc", "--role", role, *extra, unbuffered=True)


# -- measurements -----------------------------------------------------------------------------


def bench_parse(count: int) -> float:
    """Lines/s through LineReader + decode + classify, from memory."""
    import anyio

    from acp_bridge.rpc.framing import LineReader
    from acp_bridge.wire.jsonrpc import classify, decode_line

    data = _update_line() * count

    class Chunks(anyio.abc.ByteReceiveStream):
        def __init__(self) -> None:
            self.offset = 0

        async def receive(self, max_bytes: int = 65536) -> bytes:
            if self.offset >= len(data):
                raise anyio.EndOfStream
            chunk = data[self.offset : self.offset + max_bytes]
            self.offset += max_bytes
            return chunk

        async def aclose(self) -> None:
            pass

    async def run() -> float:
        reader = LineReader(Chunks())
        started = time.perf_counter()
        for _ in range(count):
            classify(decode_line(await reader.receive_line()))
        return count / (time.perf_counter() - started)

    return anyio.run(run)


def bench_notifications_ours(count: int, backend: str) -> float:
    import anyio

    from acp_bridge.rpc.peer import JsonRpcPeer

    async def run() -> float:
        async with await anyio.open_process(_child("flood", str(count))) as process:
            assert process.stdout is not None and process.stdin is not None
            peer = JsonRpcPeer(process.stdout, process.stdin, name="flood")
            done = anyio.Event()
            seen = 0
            started = 0.0

            def on_update(params: Any) -> None:
                nonlocal seen, started
                if seen == 0:
                    started = time.perf_counter()
                seen += 1
                if seen == count:
                    done.set()

            peer.on_notification("session/update", on_update)
            async with anyio.create_task_group() as tg:
                await tg.start(peer.run)
                await done.wait()
                elapsed = time.perf_counter() - started
                await peer.aclose()
            await process.stdin.aclose()
        return (count - 1) / elapsed

    return anyio.run(run, backend=backend)


def bench_notifications_sdk(count: int) -> float:
    from acp.stdio import spawn_stdio_connection

    async def run() -> float:
        done = asyncio.Event()
        seen = 0
        started = 0.0

        async def handler(method: str, params: Any, is_notification: bool) -> Any:
            nonlocal seen, started
            if seen == 0:
                started = time.perf_counter()
            seen += 1
            if seen == count:
                done.set()
            return None

        command = _child("flood", str(count))
        async with spawn_stdio_connection(handler, command[0], *command[1:]) as (_conn, process):
            await done.wait()
            elapsed = time.perf_counter() - started
            assert process.stdin is not None
            process.stdin.close()
        return (count - 1) / elapsed

    return asyncio.run(run())


async def _round_trips(call: Callable[[int], Awaitable[Any]], count: int, parallel: int) -> float:
    import anyio

    for n in range(50):  # warm up both sides
        await call(n)
    started = time.perf_counter()
    if parallel == 1:
        for n in range(count):
            await call(n)
    else:

        async def worker(offset: int) -> None:
            for n in range(offset, count, parallel):
                await call(n)

        async with anyio.create_task_group() as tg:
            for offset in range(parallel):
                tg.start_soon(worker, offset)
    return count / (time.perf_counter() - started)


def bench_round_trips_ours(count: int, parallel: int, backend: str) -> float:
    import anyio

    from acp_bridge.rpc.peer import JsonRpcPeer

    async def run() -> float:
        async with await anyio.open_process(_child("serve-ours")) as process:
            assert process.stdout is not None and process.stdin is not None
            peer = JsonRpcPeer(process.stdout, process.stdin, name="server")
            async with anyio.create_task_group() as tg:
                await tg.start(peer.run)

                async def call(n: int) -> Any:
                    return await peer.request("echo", {"n": n})

                rate = await _round_trips(call, count, parallel)
                await peer.aclose()
            await process.stdin.aclose()
        return rate

    return anyio.run(run, backend=backend)


def bench_round_trips_sdk(count: int, parallel: int) -> float:
    from acp.stdio import spawn_stdio_connection

    async def handler(method: str, params: Any, is_notification: bool) -> Any:
        return None

    async def run() -> float:
        command = _child("serve-sdk")
        async with spawn_stdio_connection(handler, command[0], *command[1:]) as (conn, _process):

            async def call(n: int) -> Any:
                return await conn.send_request("echo", {"n": n})

            return await _round_trips(call, count, parallel)

    return asyncio.run(run())


# -- reporting --------------------------------------------------------------------------------


def median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def run_all(runs: int, notifications: int, calls: int) -> list[tuple[str, float, float | None]]:
    """Medians of ``runs`` runs; within each run the SDK and ours on both backends are measured
    one after another (interleaved), so a slow moment of the machine hits every side alike."""
    rows: list[tuple[str, float, float | None]] = []

    def step(label: str) -> None:
        print(f"  measuring {label} ...", file=sys.stderr, flush=True)

    def interleaved(
        measures: dict[str, Callable[[], float]],
    ) -> dict[str, float]:
        taken: dict[str, list[float]] = {name: [] for name in measures}
        for _ in range(runs):
            for name, measure in measures.items():
                taken[name].append(measure())
        return {name: statistics.median(values) for name, values in taken.items()}

    step("parse")
    rows.append(
        (
            "framing + parse + classify, from memory (lines/s)",
            median_of(runs, lambda: bench_parse(100_000)),
            None,
        )
    )
    step("notifications")
    rates = interleaved(
        {
            "sdk": lambda: bench_notifications_sdk(notifications),
            "asyncio": lambda: bench_notifications_ours(notifications, "asyncio"),
            "trio": lambda: bench_notifications_ours(notifications, "trio"),
        }
    )
    for backend in ("asyncio", "trio"):
        rows.append(
            (f"incoming notifications over a pipe, {backend} (msg/s)", rates[backend], rates["sdk"])
        )
    for parallel in (1, 32):
        step(f"round trips x{parallel}")
        rates = interleaved(
            {
                "sdk": lambda p=parallel: bench_round_trips_sdk(calls, p),
                "asyncio": lambda p=parallel: bench_round_trips_ours(calls, p, "asyncio"),
                "trio": lambda p=parallel: bench_round_trips_ours(calls, p, "trio"),
            }
        )
        for backend in ("asyncio", "trio"):
            rows.append(
                (
                    f"request round trips, {parallel} in flight, {backend} (calls/s)",
                    rates[backend],
                    rates["sdk"],
                )
            )
    return rows


def render(rows: list[tuple[str, float, float | None]], runs: int) -> str:
    lines = [
        "| measurement | acp-bridge | official SDK | ratio |",
        "|---|---:|---:|---:|",
    ]
    for label, ours, sdk in rows:
        sdk_text = f"{sdk:,.0f}" if sdk is not None else "n/a"
        ratio = f"{ours / sdk:.2f}x" if sdk else "n/a"
        lines.append(f"| {label} | {ours:,.0f} | {sdk_text} | {ratio} |")
    header = (
        f"Machine: {machine()}\n\n"
        f"Date: {datetime.date.today().isoformat()}. Median of {runs} runs each.\n"
    )
    return header + "\n" + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--role", choices=["flood", "serve-ours", "serve-sdk"], help=argparse.SUPPRESS
    )
    parser.add_argument("count", nargs="?", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--notifications", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--write", type=Path, help="update this markdown file's bench_rpc section")
    args = parser.parse_args()
    if args.role == "flood":
        role_flood(args.count)
        return
    if args.role == "serve-ours":
        role_serve_ours()
        return
    if args.role == "serve-sdk":
        role_serve_sdk()
        return
    print("bench_rpc: acp-bridge JSON-RPC peer vs the official SDK", file=sys.stderr)
    table = render(run_all(args.runs, args.notifications, args.calls), args.runs)
    print(table)
    if args.write:
        write_section(args.write, "bench_rpc", table, "")
        print(f"wrote {args.write}", file=sys.stderr)


if __name__ == "__main__":
    main()
