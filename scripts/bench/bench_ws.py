"""Benchmark: lines through the host's WebSocket transport against the same lines through a Unix
socket (issue 22, "WebSocket against Unix socket throughput").

One measurement per transport and anyio backend, the median of several runs: a client writes N
lines of about 200 bytes (``session/update`` notifications) through a
:class:`~acp_bridge.rpc.framing.LineWriter`, as the JSON-RPC peer does; an echo handler on the
server sends back every byte it reads; the client reads the N lines back with a
:class:`~acp_bridge.rpc.framing.LineReader`. The clock runs from the first write to the N-th
line read back, so each line crossed the transport both ways. Client and server run in this one
process (one core), so the figures compare the transports' costs, not the machine's bandwidth.

- **unix**: :func:`anyio.create_unix_listener` and :func:`anyio.connect_unix`; bytes as written.
- **websocket**: :func:`~acp_bridge.host.websocket.serve_websocket` on 127.0.0.1 and
  :func:`~acp_bridge.host.websocket.connect_websocket`, with the bearer token: one text message
  per line each way, masked from the client as RFC 6455 asks.

Run ``python -m scripts.bench.bench_ws [--lines 100000] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import ByteStream

from acp_bridge.host.websocket import connect_websocket, serve_websocket
from acp_bridge.rpc.framing import LineReader, LineWriter
from scripts.common import machine

TOKEN = "bench-token"
TRANSPORTS = ("unix", "websocket")
BACKENDS = ("asyncio", "trio")


def _line(n: int) -> bytes:
    """A ``session/update`` notification of about 200 bytes."""
    text = "The quick brown fox jumps over the lazy dog. "
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": f"s{n % 10}", "update": update},
    }
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


async def _echo(stream: ByteStream) -> None:
    async with stream:
        try:
            async for chunk in stream:
                await stream.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


@asynccontextmanager
async def _unix_client() -> AsyncIterator[ByteStream]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "bench.sock"
        listener = await anyio.create_unix_listener(path)

        async def serve_one() -> None:
            await _echo(await listener.accept())

        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(serve_one)
            async with await anyio.connect_unix(path) as stream:
                yield stream


@asynccontextmanager
async def _websocket_client() -> AsyncIterator[ByteStream]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(partial(serve_websocket, "127.0.0.1:0", _echo, token=TOKEN))
        async with await connect_websocket(f"ws://127.0.0.1:{port}/acp", token=TOKEN) as stream:
            yield stream
        tg.cancel_scope.cancel()


async def _measure(transport: str, lines: list[bytes]) -> float:
    """Seconds for ``lines`` to go through ``transport`` and back."""
    client = _unix_client() if transport == "unix" else _websocket_client()
    async with client as stream, anyio.create_task_group() as tg:
        writer = LineWriter(stream)
        reader = LineReader(stream)
        tg.start_soon(writer.run)
        start = time.perf_counter()

        async def send_all() -> None:
            for line in lines:
                await writer.send_line(line)

        tg.start_soon(send_all)
        for _ in lines:
            await reader.receive_line()
        elapsed = time.perf_counter() - start
        writer.close()
    return elapsed


def run_all(count: int, runs: int) -> list[tuple[str, str, float]]:
    """(backend, transport, median seconds) for every pair."""
    lines = [_line(n) for n in range(count)]
    results = []
    for backend in BACKENDS:
        samples: dict[str, list[float]] = {transport: [] for transport in TRANSPORTS}
        for _ in range(runs):  # interleaved, run by run, so drift hits both alike
            for transport in TRANSPORTS:
                samples[transport].append(anyio.run(_measure, transport, lines, backend=backend))
        for transport in TRANSPORTS:
            results.append((backend, transport, statistics.median(samples[transport])))
    return results


def render(results: list[tuple[str, str, float]], count: int, line_bytes: int, runs: int) -> str:
    rows = [
        "| backend | transport | lines/s (both ways) | MB/s each way | vs unix |",
        "|---|---|---:|---:|---:|",
    ]
    unix = {backend: seconds for backend, transport, seconds in results if transport == "unix"}
    for backend, transport, seconds in results:
        rate = count / seconds
        megabytes = count * line_bytes / seconds / 1e6
        ratio = unix[backend] / seconds
        rows.append(f"| {backend} | {transport} | {rate:,.0f} | {megabytes:.1f} | {ratio:.2f}x |")
    return (
        f"{count:,} lines of {line_bytes} bytes through an echo handler and back, in one process; "
        f"median of {runs} runs. Machine: {machine()}\n\n" + "\n".join(rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    args = parser.parse_args()
    print("bench_ws: WebSocket against Unix socket, lines both ways", file=sys.stderr)
    results = run_all(args.lines, args.runs)
    print(render(results, args.lines, len(_line(0)), args.runs))


if __name__ == "__main__":
    main()
