"""Benchmark: the conversation host (issue 22's "Done when"), every figure in one run.

Real processes throughout: ``acp-bridge serve`` with ``fixtures/agents/stamp_agent.py`` (the
echo agent that notes when each prompt line reached its stdin), and the clients in processes of
their own. Each figure is the median of several runs; the comparisons run interleaved, run by
run, so a busy moment of a shared machine hits both sides.

* **fan-out**: one turn of ``--chunks`` (10,000) ``agent_message_chunk`` updates to 10 attached
  clients, against the same turn to one client. Each client is a process of its own
  (``python -m scripts.bench.bench_host _count``): it connects, ``initialize``,
  ``session/resume`` (live from now), says it is ready, then counts the chunks it reads, and
  stays attached until every client has counted (as an editor or ``watch`` would; an exiting
  interpreter would take the CPU from the clients still counting). The turn is queued with
  ``_acp_bridge/send`` by the driver, which is not attached. A turn's rate is the chunks over
  the time from the send to the LAST client's last chunk. A run is four turns (1, 10, 10, 1
  clients, or 10, 1, 1, 10), its ratio the time of its two one-client turns over that of its
  two ten-client turns. Budget: the 10 clients' rate at least 0.9x the one client's. The
  host's CPU is read from ``/proc/PID/task/*/schedstat`` (nanoseconds).
* **attach**: ``acp-bridge attach`` spawned as an editor would, ``initialize``, then
  ``session/load`` of a conversation with history (one turn of ``--history-chunks`` chunks, its
  agent running): the time from the spawn to the first replayed ``session/update``, with the
  ``initialize`` answer and the whole replay's answer beside it.
* **WebSocket against Unix socket**: the same counting client, one at a time, over the Unix
  socket and over ``ws://127.0.0.1`` (the bearer token) of one host, the flood turn each. This
  host is built from the library (:class:`~acp_bridge.host.serve.Host` with its Unix listener and
  a :class:`~acp_bridge.host.websocket.WebSocketListener`, ``_host`` below) because ``serve
  --listen`` is not in this checkout yet; the raw transports without a host are
  ``scripts/bench/bench_ws.py``'s figures.
* **idle memory**: a second ``serve`` with ``--agent-idle`` small; 100 conversations
  (``session/new``, one ``echo`` turn each), the client gone, and every agent stopped (status
  says so, and the host has no child process left): the RSS of the host process alone
  (psutil). Budget: under 100 MB.
* **send**: a client process connected to the host (``connect_host``, as the verbs do) stamps
  ``time.time()`` and calls ``_acp_bridge/send``; the agent stamps the moment the prompt line
  arrives on its stdin. Budget: under 20 ms. Beside it, the whole ``acp-bridge send ID -m TEXT``
  command: its wall time (spawn to exit), and spawn to the agent's stamp.

Run ``python -m scripts.bench.bench_host [--runs 3] [--write docs/benchmarks.md]`` (``--write``
rewrites only this benchmark's section). ``scripts/bench.py`` runs it as the suite ``host``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
from anyio.abc import ByteStream, Process, SocketAttribute

from acp_bridge.host.client import (
    Endpoint,
    HostClient,
    connect_host,
    open_endpoint_stream,
    text_content,
)
from acp_bridge.rpc.framing import LineReader
from scripts.bench.host_bench_common import (
    Figures,
    drained,
    host_process,
    med,
    progress,
    publish,
    span,
)
from scripts.common import ROOT, code_version, machine, module_command

AGENT = ROOT / "fixtures" / "agents" / "stamp_agent.py"
MODULE = "scripts.bench.bench_host"
TOKEN = "bench-host-token"
CHUNK = b'"agent_message_chunk"'
MIB = 1024 * 1024
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
INTRO = (
    "## The conversation host (`scripts/bench/bench_host.py`)\n\n"
    "Issue 22's budgets for the host, measured in one run against real processes: `acp-bridge "
    "serve`, `acp-bridge attach` and `acp-bridge send`, and clients in processes of their own "
    "(the module's text says how each figure is taken). `python -m scripts.bench.bench_host "
    "--write docs/benchmarks.md` rewrites this section; `scripts/bench.py` runs it as the "
    "suite `host`.\n"
)


@dataclass(frozen=True)
class Plan:
    runs: int = 3
    chunks: int = 10_000
    clients: int = 10
    history_chunks: int = 1_000
    paced_chunks: int = 1_000
    paced_gap_ms: float = 2.0
    idle_conversations: int = 100
    agent_idle_s: float = 0.3
    send_rounds: int = 20
    cli_send_rounds: int = 5


def agent_argv() -> list[str]:
    return [sys.executable, "-u", str(AGENT), "--quiet"]


# -- hosts -------------------------------------------------------------------------------------


@dataclass
class Served:
    """A host process and how to reach it."""

    process: Process
    store: Path
    socket: Path
    port: int | None = None

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(socket=self.socket)

    @property
    def ws_endpoint(self) -> Endpoint:
        assert self.port is not None
        return Endpoint(url=f"ws://127.0.0.1:{self.port}/acp", token=TOKEN)

    @property
    def pid(self) -> int:
        return self.process.pid


@asynccontextmanager
async def serve(
    workdir: Path, name: str, *options: str, stamps: Path | None = None, websocket: bool = False
) -> AsyncIterator[Served]:
    """``acp-bridge serve OPTIONS -- stamp agent`` (with ``websocket``: this module's ``_host``,
    a Unix socket and a WebSocket listener), until its first stderr line says it serves."""
    store, socket = workdir / f"{name}.db", workdir / f"{name}.sock.d" / "host.sock"
    if websocket:
        argv = module_command(MODULE, "_host", "--store", str(store), "--socket", str(socket))
    else:
        argv = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(store)]
        argv += ["--socket", str(socket), *options, "--", *agent_argv()]
    env = {**ENV, **({"STAMP_AGENT_FILE": str(stamps)} if stamps else {})}
    async with host_process(argv, env, workdir, name) as (process, first):
        port = int(first.rsplit("ws port ", 1)[1].split()[0]) if websocket else None
        yield Served(process, store, socket, port)


@asynccontextmanager
async def host_client(served: Served) -> AsyncIterator[HostClient]:
    async with connect_host(served.endpoint, store=served.store, client_name="bench") as client:
        yield client


async def new_conversation(served: Served, cwd: Path) -> str:
    """A new conversation (its agent started); the connection that made it is gone after."""
    async with host_client(served) as client:
        answer = await client.call("session/new", {"cwd": str(cwd), "mcpServers": []})
    return str(answer["sessionId"])


async def one_turn(served: Served, conversation: str, text: str) -> None:
    async with host_client(served) as client:
        await client.send(conversation, text_content(text))
        await drained(client, conversation)


# -- the client processes ------------------------------------------------------------------------


async def _handshake(stream: ByteStream, conversation: str) -> bytes:
    """``initialize`` and ``session/resume`` on a raw stream; the bytes read past the answer."""
    requests = [
        ("initialize", {"protocolVersion": 1, "clientCapabilities": {}}),
        ("session/resume", {"sessionId": conversation, "cwd": os.getcwd(), "mcpServers": []}),
    ]
    pending = b""
    for ident, (method, params) in enumerate(requests, 1):
        message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        await stream.send(json.dumps(message).encode() + b"\n")
        while True:
            while b"\n" not in pending:
                pending += await stream.receive()
            line, pending = pending.split(b"\n", 1)
            answer = json.loads(line)
            if answer.get("id") == ident and "method" not in answer:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                break
    return pending


async def _count(endpoint: Endpoint, conversation: str, chunks: int) -> None:
    """The counting client: ready, then one JSON line when ``chunks`` chunks arrived; then it
    stays attached until its stdin closes (see :func:`_hold`).

    Over a Unix socket it reads with blocking ``recv_into`` after the handshake, outside the
    event loop: a wake-up then costs the client a few microseconds, not an event loop's pass,
    so the figure is the host's (ten clients share the host's 2 cores here). Over a WebSocket
    it reads through the library's client stream."""
    async with await open_endpoint_stream(endpoint) as stream:
        data = await _handshake(stream, conversation)
        print("ready", flush=True)
        cpu = time.process_time()
        raw = stream.extra(SocketAttribute.raw_socket, None) if endpoint.url is None else None
        if raw is not None:
            counted, first, last = _count_blocking(raw, data, chunks)
        else:
            counted, first, last = await _count_stream(stream, data, chunks)
        cpu = time.process_time() - cpu
        print(json.dumps({"first": first, "last": last, "count": counted, "cpu": cpu}), flush=True)
        _hold()


def _hold() -> None:
    """Stay attached, idle, until the driver closes stdin: a client that counted all its chunks
    does not hang up and exit (a Python interpreter's teardown, several ms of CPU each) while
    the others still count. On 2 cores that teardown delayed the last clients by about 4 ms
    each (one scheduler tick per waiting client), which is the benchmark's cost, not the
    host's; an attached editor or ``watch`` does not exit at the end of a turn either."""
    sys.stdin.buffer.read()


def _count_blocking(raw: socket.socket, data: bytes, chunks: int) -> tuple[int, float, float]:
    raw.setblocking(True)
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    keep = len(CHUNK) - 1
    counted, first = data.count(CHUNK), 0.0
    tail = data[-keep:]
    while counted < chunks:
        if counted and not first:
            first = time.time()
        size = raw.recv_into(view[keep:])
        if not size:
            break
        view[:keep] = tail.rjust(keep, b" ")
        counted += buffer.count(CHUNK, 0, keep + size)
        tail = bytes(view[size : keep + size])
    if counted and not first:
        first = time.time()
    return counted, first, time.time()


async def _count_stream(stream: ByteStream, data: bytes, chunks: int) -> tuple[int, float, float]:
    counted, tail, first = 0, b"", 0.0
    while True:
        counted += (tail + data).count(CHUNK)
        if counted and not first:
            first = time.time()
        if counted >= chunks:
            break
        tail = (tail + data)[-(len(CHUNK) - 1) :]
        data = await stream.receive()
    return counted, first, time.time()


async def _send_rounds(endpoint: Endpoint, store: Path, conversation: str) -> None:
    """The sending client: for each line of stdin, stamp and ``_acp_bridge/send`` it."""
    async with connect_host(endpoint, store=store, client_name="bench-send") as client:
        print("ready", flush=True)
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            started = time.time()
            seq = await client.send(conversation, text_content(line.strip()))
            answered = time.time()
            print(json.dumps({"t0": started, "t1": answered, "seq": seq}), flush=True)


async def _ws_host(store_path: Path, socket_path: Path) -> None:
    """A host of the stamp agent on a Unix socket AND on ws://127.0.0.1 (a free port), until
    SIGTERM: ``serve --listen`` is not in this checkout yet."""
    from acp_bridge.client.options import ClientOptions
    from acp_bridge.client.permissions import PermissionPolicy
    from acp_bridge.conversation.records import ConversationRecord
    from acp_bridge.conversation.store import QueueStore
    from acp_bridge.host.conversations import HostSettings
    from acp_bridge.host.serve import Host, open_unix_listener
    from acp_bridge.host.websocket import WebSocketListener
    from acp_bridge.process.spec import AgentSpec

    argv = agent_argv()

    def spec_for(record: ConversationRecord) -> AgentSpec:
        return AgentSpec(list(record.agent.get("argv") or argv), cwd=Path(record.cwd))

    def options_for(policy: PermissionPolicy) -> ClientOptions:
        return ClientOptions(permission=policy, base_env=dict(os.environ))

    store = QueueStore.open(store_path)
    try:
        host = Host(
            store,
            store_path,
            HostSettings(spec_for, options_for),
            socket_path=socket_path,
            new_agent=lambda name: {"argv": argv},
        )
        listener = await open_unix_listener(socket_path)
        websocket = await WebSocketListener.open("127.0.0.1:0", token=TOKEN)
        async with anyio.create_task_group() as tg:
            await tg.start(host.run, listener)
            host.task_group.start_soon(host.serve_listener, websocket)
            progress(f"serving {store_path} on {socket_path} and ws port {websocket.port}")
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            tg.cancel_scope.cancel()
    finally:
        store.close()


async def spawn_counters(endpoint: Endpoint, conversation: str, count: int, chunks: int) -> Any:
    """``count`` counting clients, a process each, all ready."""
    where = ["--socket", str(endpoint.socket)] if endpoint.url is None else ["--url", endpoint.url]
    argv = module_command(MODULE, "_count", *where, "--conversation", conversation)
    argv += ["--chunks", str(chunks)]
    processes = [
        await anyio.open_process(argv, stdin=subprocess.PIPE, stderr=None, env=ENV)
        for _ in range(count)
    ]
    readers = []
    for process in processes:
        assert process.stdout is not None
        reader = LineReader(process.stdout)
        if await reader.receive_line() != b"ready":
            raise RuntimeError("a counting client did not get ready")
        readers.append(reader)
    return processes, readers


def cpu_seconds(pid: int) -> float:
    """The CPU time of process ``pid`` so far, all its threads: to the nanosecond from Linux's
    schedstat where there is one (``cpu_times`` counts in clock ticks, 10 ms, which is a
    tenth of what ten clients cost or save in a turn), else psutil's user + system."""
    total = 0
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with (
                suppress(FileNotFoundError, ProcessLookupError),
                open(f"/proc/{pid}/task/{thread}/schedstat") as stat,
            ):
                total += int(stat.read().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return float(sum(psutil.Process(pid).cpu_times()[:2]))
    return total / 1e9


async def flood_to(
    served: Served,
    endpoint: Endpoint,
    conversation: str,
    clients: int,
    chunks: int,
    prompt: str | None = None,
) -> tuple[float, float, float, float, float]:
    """One flood turn (or ``prompt``'s, of ``chunks`` chunks) to ``clients`` counting
    processes: (chunks/s to the last of them, ms to the first chunk of the slowest, the host's
    CPU seconds for the turn, the clients', chunks/s to the median client)."""
    processes, readers = await spawn_counters(endpoint, conversation, clients, chunks)
    try:
        async with host_client(served) as client:
            cpu = cpu_seconds(served.pid)
            started = time.time()
            await client.send(conversation, text_content(prompt or f"flood {chunks}"))
            with anyio.fail_after(300):
                results = [json.loads(await reader.receive_line()) for reader in readers]
            await drained(client, conversation)
            cpu = cpu_seconds(served.pid) - cpu
    finally:
        for process in processes:
            assert process.stdin is not None
            await process.stdin.aclose()  # each hangs up and exits now (see _hold)
        for process in processes:
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.aclose()
    if any(r["count"] < chunks for r in results):
        raise RuntimeError(f"a client counted fewer than {chunks} chunks: {results}")
    last = max(r["last"] for r in results)
    first = max(r["first"] for r in results)
    clients_cpu = sum(r["cpu"] for r in results)
    median = statistics.median(r["last"] for r in results)
    return (
        chunks / (last - started),
        (first - started) * 1000,
        cpu,
        clients_cpu,
        chunks / (median - started),
    )


# -- the measurements ----------------------------------------------------------------------------


async def measure_fanout(plan: Plan, served: Served, workdir: Path, figures: Figures) -> None:
    """Each run: four turns, one client, ten, ten, one (the next run ten, one, one, ten), so
    that a drift of the machine's speed within the run cancels; the run's ratio is the one
    client's two turns' time over the ten clients' two."""
    conversation = await new_conversation(served, workdir)
    await one_turn(served, conversation, "echo warm up")
    for run in range(plan.runs):
        progress(
            f"  fan-out: {plan.chunks:,} chunks to 1 and {plan.clients} clients, run {run + 1}"
        )
        seconds = {1: 0.0, plan.clients: 0.0}
        pair = (1, plan.clients) if run % 2 == 0 else (plan.clients, 1)
        for clients in (*pair, *reversed(pair)):
            rate, first_ms, cpu, clients_cpu, median_rate = await flood_to(
                served, served.endpoint, conversation, clients, plan.chunks
            )
            figures.add(f"fanout.{clients}.median_client_updates_per_s", median_rate)
            figures.add(f"fanout.{clients}.host_cpu_s", cpu)
            # The host's CPU against the turn's time: near 1 it sets the pace, not the agent.
            figures.add(f"fanout.{clients}.host_busy", cpu * rate / plan.chunks)
            figures.add(f"fanout.{clients}.clients_cpu_s", clients_cpu)
            seconds[clients] += plan.chunks / rate
            figures.add(f"fanout.{clients}.updates_per_s", rate)
            figures.add(f"fanout.{clients}.first_update_ms", first_ms)
        figures.add("fanout.ratio", seconds[1] / seconds[plan.clients])


async def measure_paced(plan: Plan, served: Served, workdir: Path, figures: Figures) -> None:
    """The same comparison at a real agent's rate: ``trickle`` chunks with a gap between them
    (the fixture sleeps ``paced_gap_ms`` after each), where the host waits on the agent and
    what ten clients cost shows as the host's CPU per chunk, not as a rate."""
    conversation = await new_conversation(served, workdir)
    await one_turn(served, conversation, "echo warm up")
    prompt = f"trickle {plan.paced_chunks} {plan.paced_gap_ms:g}"
    for run in range(plan.runs):
        progress(
            f"  at a real agent's rate: {plan.paced_chunks:,} chunks {plan.paced_gap_ms:g} ms "
            f"apart to 1 and {plan.clients} clients, run {run + 1}"
        )
        order = (1, plan.clients) if run % 2 == 0 else (plan.clients, 1)
        for clients in order:
            rate, _, cpu, clients_cpu, _ = await flood_to(
                served, served.endpoint, conversation, clients, plan.paced_chunks, prompt
            )
            figures.add(f"paced.{clients}.updates_per_s", rate)
            figures.add(f"paced.{clients}.host_us_per_chunk", cpu / plan.paced_chunks * 1e6)
            figures.add(f"paced.{clients}.clients_cpu_s", clients_cpu)


async def measure_attach(plan: Plan, served: Served, workdir: Path, figures: Figures) -> None:
    conversation = await new_conversation(served, workdir)
    await one_turn(served, conversation, f"flood {plan.history_chunks}")
    for run in range(plan.runs):
        progress(
            f"  attach + session/load ({plan.history_chunks:,} chunks of history), run {run + 1}"
        )
        argv = [sys.executable, "-m", "acp_bridge", "attach", "--store", str(served.store)]
        argv += ["--socket", str(served.socket)]
        started = time.perf_counter()
        process = await anyio.open_process(argv, stderr=subprocess.DEVNULL, env=ENV, cwd=workdir)
        async with process:
            assert process.stdin is not None and process.stdout is not None
            lines = LineReader(process.stdout)
            initialize = {"protocolVersion": 1, "clientCapabilities": {}}
            load = {"sessionId": conversation, "cwd": str(workdir), "mcpServers": []}
            await process.stdin.send(_request(1, "initialize", initialize))
            while json.loads(await lines.receive_line()).get("id") != 1:
                pass
            initialized = time.perf_counter()
            await process.stdin.send(_request(2, "session/load", load))
            first, replayed = 0.0, 0
            while True:
                message = json.loads(await lines.receive_line())
                if message.get("method") == "session/update":
                    replayed += 1
                    first = first or time.perf_counter()
                elif message.get("id") == 2:
                    break
            loaded = time.perf_counter()
            await process.stdin.aclose()
            with anyio.fail_after(30):
                await process.wait()
        figures.add("attach.initialize_ms", (initialized - started) * 1000)
        figures.add("attach.first_update_ms", (first - started) * 1000)
        figures.add("attach.loaded_ms", (loaded - started) * 1000)
        figures.add("attach.replayed", replayed)


def _request(ident: int, method: str, params: Any) -> bytes:
    message = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
    return json.dumps(message).encode() + b"\n"


async def measure_websocket(plan: Plan, workdir: Path, figures: Figures) -> None:
    async with serve(workdir, "ws", websocket=True) as served:
        conversation = await new_conversation(served, workdir)
        await one_turn(served, conversation, "echo warm up")
        for run in range(plan.runs):
            progress(f"  websocket vs unix socket: {plan.chunks:,} chunks, run {run + 1}")
            rates = {}
            for transport, endpoint in (("unix", served.endpoint), ("ws", served.ws_endpoint)):
                rate, *_ = await flood_to(served, endpoint, conversation, 1, plan.chunks)
                rates[transport] = rate
                figures.add(f"transport.{transport}.updates_per_s", rate)
            figures.add("transport.ratio", rates["ws"] / rates["unix"])


async def measure_idle(plan: Plan, workdir: Path, figures: Figures) -> None:
    count = plan.idle_conversations
    progress(f"  idle memory: {count} conversations, --agent-idle {plan.agent_idle_s:g}")
    idle = str(plan.agent_idle_s)
    async with serve(workdir, "idle", "--agent-idle", idle) as served:
        host = psutil.Process(served.pid)
        figures.add("idle.rss_start_mib", host.memory_info().rss / MIB)
        ids: list[str] = []
        async with host_client(served) as client, anyio.create_task_group() as tg:
            limiter = anyio.CapacityLimiter(4)  # a few agents start at once, as users arrive

            async def one() -> None:
                async with limiter:
                    params = {"cwd": str(workdir), "mcpServers": []}
                    answer = await client.call("session/new", params)
                    ids.append(str(answer["sessionId"]))
                    await client.send(ids[-1], text_content("echo hello there"))

            for _ in range(count):
                tg.start_soon(one)
        peak = host.memory_info().rss
        async with host_client(served) as client:
            started = time.monotonic()
            with anyio.fail_after(120):
                while True:  # the host's own word for it: every agent stopped, nothing queued
                    rows = {row["conversationId"]: row for row in await client.status()}
                    done = [
                        rows[i]
                        for i in ids
                        if i in rows
                        and rows[i]["agentState"] == "stopped"
                        and not rows[i]["queueDepth"]
                    ]
                    if len(done) == len(ids):
                        break
                    await anyio.sleep(0.1)
            figures.add("idle.all_stopped_after_s", time.monotonic() - started)
        figures.add("idle.agents_alive", len(host.children(recursive=True)))
        figures.add("idle.rss_mib", host.memory_info().rss / MIB)
        figures.add("idle.rss_while_creating_mib", peak / MIB)
        figures.notes["idle.conversations"] = count


async def measure_send(
    plan: Plan, served: Served, workdir: Path, stamps: Path, figures: Figures
) -> None:
    conversation = await new_conversation(served, workdir)
    await one_turn(served, conversation, "echo warm up")
    progress(
        f"  send: {plan.send_rounds} x _acp_bridge/send, {plan.cli_send_rounds} x acp-bridge send"
    )
    argv = module_command(
        MODULE, "_send", "--socket", str(served.socket), "--store", str(served.store)
    )
    argv += ["--conversation", conversation]
    async with AsyncExitStack() as stack:
        sender = await anyio.open_process(argv, stderr=None, env=ENV)
        stack.push_async_callback(_end, sender)
        assert sender.stdin is not None and sender.stdout is not None
        answers = LineReader(sender.stdout)
        if await answers.receive_line() != b"ready":
            raise RuntimeError("the sending client did not get ready")
        watcher = await stack.enter_async_context(host_client(served))
        for n in range(plan.send_rounds):
            text = f"echo round {n}"
            await sender.stdin.send(text.encode() + b"\n")
            answer = json.loads(await answers.receive_line())
            await drained(watcher, conversation)
            stamp = _stamp(stamps, text)
            figures.add("send.call_to_stdin_ms", (stamp - answer["t0"]) * 1000)
            figures.add("send.call_answered_ms", (answer["t1"] - answer["t0"]) * 1000)
        for n in range(plan.cli_send_rounds):
            text = f"echo cli {n}"
            command = [sys.executable, "-m", "acp_bridge", "send", "--store", str(served.store)]
            command += ["--socket", str(served.socket), conversation, "-m", text]
            started = time.time()
            done = await anyio.run_process(command, env=ENV, cwd=workdir)
            ended = time.time()
            int(done.stdout.decode().split()[0])  # its seq: it was sent
            await drained(watcher, conversation)
            stamp = _stamp(stamps, text)
            figures.add("send.cli_wall_ms", (ended - started) * 1000)
            figures.add("send.cli_spawn_to_stdin_ms", (stamp - started) * 1000)


async def _end(process: Process) -> None:
    if process.stdin is not None:
        await process.stdin.aclose()
    with anyio.move_on_after(10):
        await process.wait()
    if process.returncode is None:
        process.kill()
    await process.aclose()


def _stamp(stamps: Path, text: str) -> float:
    """When the agent read the prompt ``text`` (its stamp file's line for it)."""
    for line in reversed(stamps.read_text().splitlines()):
        seconds, _, prompt = line.partition(" ")
        if prompt == text:
            return float(seconds)
    raise RuntimeError(f"the agent never stamped {text!r}")


async def measure(plan: Plan, workdir: Path) -> Figures:
    figures = Figures()
    stamps = workdir / "stamps.txt"
    async with serve(workdir, "main", stamps=stamps) as served:
        await measure_fanout(plan, served, workdir, figures)
        await measure_paced(plan, served, workdir, figures)
        await measure_attach(plan, served, workdir, figures)
        await measure_send(plan, served, workdir, stamps, figures)
    await measure_websocket(plan, workdir, figures)
    await measure_idle(plan, workdir, figures)
    return figures


def run_all(plan: Plan) -> dict[str, Any]:
    """Every measurement, with the machine's load before and after (for the JSON file)."""
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-host-") as tmp:
        figures = anyio.run(measure, plan, Path(tmp).resolve())
    return {
        "plan": asdict(plan),
        "samples": figures.samples,
        "notes": figures.notes,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "seconds": time.monotonic() - started,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "code": code_version(),
    }


# -- the report ----------------------------------------------------------------------------------


def verdicts(raw: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(budget, limit, measured, met) for each of the host's budgets."""
    plan = raw["plan"]
    ratio = med(raw, "fanout.ratio")
    rss = med(raw, "idle.rss_mib")
    send = med(raw, "send.call_to_stdin_ms")
    stopped = raw["samples"]["idle.agents_alive"][-1] == 0
    return [
        (
            f"{plan['clients']} attached clients against one: the rate of a "
            f"{plan['chunks']:,}-chunk turn",
            ">= 0.9x",
            f"{ratio:.2f}x",
            ratio >= 0.9,
        ),
        (
            f"host RSS with {plan['idle_conversations']} idle conversations, agents stopped",
            "< 100 MB",
            f"{rss * MIB / 1e6:.1f} MB ({rss:.1f} MiB)",
            rss * MIB < 100e6 and stopped,
        ),
        (
            "`_acp_bridge/send` to the prompt on the agent's stdin",
            "< 20 ms",
            f"{send:.2f} ms",
            send < 20,
        ),
    ]


def render(raw: dict[str, Any]) -> str:
    plan = raw["plan"]
    before, after = raw["load_before"], raw["load_after"]
    rows = [
        f"Run of {raw['date']} ({raw['code']}), {raw['seconds']:.0f} s; median (min–max) of "
        f"{plan['runs']} runs unless said. Load average at the start {before[0]:.2f} "
        f"(5 min {before[1]:.2f}), at the end {after[0]:.2f} (5 min {after[1]:.2f}): 2 cores "
        f"shared with other work, so the absolute figures move; the interleaved ratios less.\n",
        f"Machine: {machine()}\n",
        "| budget | limit | measured | verdict |",
        "|---|---|---|---|",
    ]
    for budget, limit, measured, met in verdicts(raw):
        rows.append(f"| {budget} | {limit} | {measured} | {'met' if met else 'MISSED'} |")
    clients, idle = plan["clients"], plan["idle_conversations"]
    figures = [
        (
            "one client: chunks/s (send to its last chunk)",
            span(raw, "fanout.1.updates_per_s", ",.0f"),
        ),
        (
            f"{clients} clients: chunks/s (send to the last client's last chunk)",
            span(raw, f"fanout.{clients}.updates_per_s", ",.0f"),
        ),
        (f"{clients} clients against one, per run", span(raw, "fanout.ratio", ".2f") + "x"),
        (
            f"{clients} clients: chunks/s to the median client (not the last)",
            span(raw, f"fanout.{clients}.median_client_updates_per_s", ",.0f"),
        ),
        (
            f"host CPU for the turn (user + system): one client / {clients} clients",
            f"{span(raw, 'fanout.1.host_cpu_s', '.2f')} s / "
            f"{span(raw, f'fanout.{clients}.host_cpu_s', '.2f')} s",
        ),
        (
            f"host CPU per chunk: one client / {clients} clients",
            f"{med(raw, 'fanout.1.host_cpu_s') / plan['chunks'] * 1e6:.0f} µs / "
            f"{med(raw, f'fanout.{clients}.host_cpu_s') / plan['chunks'] * 1e6:.0f} µs",
        ),
        (
            f"host busy during the turn (its CPU / the turn's time): one / {clients} clients",
            f"{span(raw, 'fanout.1.host_busy', '.2f')} / "
            f"{span(raw, f'fanout.{clients}.host_busy', '.2f')}",
        ),
        (
            f"the counting clients' CPU for the turn, all of them: one / {clients}",
            f"{med(raw, 'fanout.1.clients_cpu_s'):.2f} s / "
            f"{med(raw, f'fanout.{clients}.clients_cpu_s'):.2f} s",
        ),
        (
            f"send to the first chunk: one client / the slowest of {clients}",
            f"{med(raw, 'fanout.1.first_update_ms'):.1f} ms / "
            f"{med(raw, f'fanout.{clients}.first_update_ms'):.1f} ms",
        ),
        (
            f"at a real agent's rate ({plan['paced_chunks']:,} chunks "
            f"{plan['paced_gap_ms']:g} ms apart): chunks/s, one client / {clients} clients",
            f"{med(raw, 'paced.1.updates_per_s'):,.0f} / "
            f"{med(raw, f'paced.{clients}.updates_per_s'):,.0f}",
        ),
        (
            f"at a real agent's rate: host CPU per chunk, one client / {clients} clients",
            f"{span(raw, 'paced.1.host_us_per_chunk', '.0f')} µs / "
            f"{span(raw, f'paced.{clients}.host_us_per_chunk', '.0f')} µs",
        ),
        (
            f"at a real agent's rate: the clients' CPU for the turn, one / {clients}",
            f"{med(raw, 'paced.1.clients_cpu_s'):.2f} s / "
            f"{med(raw, f'paced.{clients}.clients_cpu_s'):.2f} s",
        ),
        (
            "`attach` spawned -> `initialize` answered",
            span(raw, "attach.initialize_ms", ".0f") + " ms",
        ),
        (
            "`attach` spawned -> first replayed `session/update` (after `session/load`)",
            span(raw, "attach.first_update_ms", ".0f") + " ms",
        ),
        (
            f"`attach` spawned -> `session/load` answered ({med(raw, 'attach.replayed'):,.0f} "
            "updates replayed)",
            span(raw, "attach.loaded_ms", ".0f") + " ms",
        ),
        (
            "one client over the Unix socket: chunks/s",
            span(raw, "transport.unix.updates_per_s", ",.0f"),
        ),
        (
            "one client over WebSocket (ws://127.0.0.1, token): chunks/s",
            span(raw, "transport.ws.updates_per_s", ",.0f"),
        ),
        ("WebSocket against Unix socket, per run", span(raw, "transport.ratio", ".2f") + "x"),
        (
            f"host RSS: started / while creating / {idle} idle, agents stopped",
            f"{med(raw, 'idle.rss_start_mib'):.1f} / "
            f"{med(raw, 'idle.rss_while_creating_mib'):.1f} / {med(raw, 'idle.rss_mib'):.1f} MiB",
        ),
        ("agent processes left under the idle host", f"{med(raw, 'idle.agents_alive'):.0f}"),
        (
            f"`_acp_bridge/send` -> prompt on the agent's stdin ({plan['send_rounds']} rounds)",
            span(raw, "send.call_to_stdin_ms", ".2f") + " ms",
        ),
        (
            "`_acp_bridge/send` -> its answer (`seq`, committed)",
            span(raw, "send.call_answered_ms", ".2f") + " ms",
        ),
        (
            f"`acp-bridge send` spawned -> prompt on the agent's stdin "
            f"({plan['cli_send_rounds']} rounds)",
            span(raw, "send.cli_spawn_to_stdin_ms", ".0f") + " ms",
        ),
        (
            "`acp-bridge send` wall time, spawn to exit",
            span(raw, "send.cli_wall_ms", ".0f") + " ms",
        ),
    ]
    rows += ["", "| figure | median (min–max) |", "|---|---:|"]
    rows += [f"| {label} | {value} |" for label, value in figures]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command")
    count = commands.add_parser("_count", help="a counting client (internal)")
    count.add_argument("--socket", type=Path)
    count.add_argument("--url")
    count.add_argument("--conversation", required=True)
    count.add_argument("--chunks", type=int, required=True)
    send = commands.add_parser("_send", help="a sending client (internal)")
    send.add_argument("--socket", type=Path, required=True)
    send.add_argument("--store", type=Path, required=True)
    send.add_argument("--conversation", required=True)
    host = commands.add_parser("_host", help="a host on a Unix socket and WebSocket (internal)")
    host.add_argument("--socket", type=Path, required=True)
    host.add_argument("--store", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=Plan.runs)
    parser.add_argument("--chunks", type=int, default=Plan.chunks)
    parser.add_argument("--clients", type=int, default=Plan.clients)
    parser.add_argument("--idle-conversations", type=int, default=Plan.idle_conversations)
    parser.add_argument("--write", type=Path, help="rewrite this benchmark's section of the file")
    parser.add_argument("--json", type=Path, help="put the raw samples in this JSON file")
    args = parser.parse_args(argv)
    if args.command == "_count":
        endpoint = (
            Endpoint(socket=args.socket)
            if args.url is None
            else Endpoint(url=args.url, token=TOKEN)
        )
        anyio.run(_count, endpoint, args.conversation, args.chunks)
        return 0
    if args.command == "_send":
        anyio.run(_send_rounds, Endpoint(socket=args.socket), args.store, args.conversation)
        return 0
    if args.command == "_host":
        anyio.run(_ws_host, args.store, args.socket)
        return 0
    plan = Plan(
        runs=args.runs,
        chunks=args.chunks,
        clients=args.clients,
        idle_conversations=args.idle_conversations,
    )
    raw = run_all(plan)
    publish(render(raw), raw, write=args.write, json_path=args.json, marker="bench_host",
            intro=INTRO, suite="host")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
