"""What the host benchmarks share (``bench_host``, ``bench_pg``): raw samples by name, the
report's median and span, progress on stderr, and waits on a host's processes and queues."""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from scripts.common import write_section

if TYPE_CHECKING:
    from anyio.abc import Process

    from acp_bridge.host.client import HostClient

__all__ = [
    "Figures",
    "drain_lines",
    "drained",
    "host_process",
    "med",
    "progress",
    "publish",
    "span",
]


@dataclass
class Figures:
    """Raw samples by name (one value per run, or per round) and notes."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(float(value))

    def median(self, key: str) -> float:
        return statistics.median(self.samples[key])

    def count(self, key: str) -> None:
        self.notes[key] = int(self.notes.get(key, 0)) + 1


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def med(raw: dict[str, Any], key: str) -> float:
    """The median of a run's raw samples (``Figures`` as JSON) named ``key``."""
    return float(statistics.median(raw["samples"][key]))


def span(raw: dict[str, Any], key: str, fmt: str, scale: float = 1.0) -> str:
    """``median (min–max)`` of the samples named ``key``, each times ``scale``."""
    values = [v * scale for v in raw["samples"][key]]
    text = format(statistics.median(values), fmt)
    if len(values) > 1:
        text += f" ({format(min(values), fmt)}–{format(max(values), fmt)})"
    return text


async def drain_lines(lines: Any) -> None:
    """Read a process's lines until it closes them (a full stderr pipe would stop a host)."""
    try:
        while True:
            await lines.receive_line()
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


async def drained(client: HostClient, conversation: str) -> None:
    """Wait until every message of ``conversation`` ended, by its owner's status. Polled:
    ``_acp_bridge/watch`` would wake on an event, but its replay of a long history is slow;
    this orders the runs, it times nothing."""
    with anyio.fail_after(120):
        while True:
            rows = await client.status(conversation)
            if rows and not rows[0]["queueDepth"] and rows[0]["runningSeq"] is None:
                return
            await anyio.sleep(0.02)


def publish(
    body: str,
    raw: dict[str, Any],
    *,
    write: Path | None,
    json_path: Path | None,
    marker: str,
    intro: str,
    suite: str,
) -> None:
    """Print a benchmark's section; with ``write``, rewrite it (between its ``marker``s) in
    that file; with ``json_path``, put its raw samples in that file's ``sections.<suite>``
    (the other suites' parts kept)."""
    print(body)
    if write:
        write_section(write, marker, body, intro)
    if json_path:
        whole = json.loads(json_path.read_text()) if json_path.exists() else {}
        whole.setdefault("sections", {})[suite] = raw
        json_path.write_text(json.dumps(whole, indent=1, default=str) + "\n")


@asynccontextmanager
async def host_process(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, name: str
) -> AsyncIterator[tuple[Process, str]]:
    """A host process started from ``argv``: (the process, its first stderr line), once that
    line says it serves. Its stderr is drained meanwhile (a full pipe would stop it); at the end
    it gets SIGTERM, 30 s, then SIGKILL (a host already killed is only reaped)."""
    from acp_bridge.rpc.framing import LineReader

    process = await anyio.open_process(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=dict(env), cwd=cwd
    )
    try:
        assert process.stderr is not None
        errors = LineReader(process.stderr)
        first = (await errors.receive_line()).decode()
        if "serving" not in first:
            raise RuntimeError(f"host {name} did not start: {first}")
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain_lines, errors)
            yield process, first
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(30):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
