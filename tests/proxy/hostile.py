"""Driving the scripted hostile editor (``fixtures/editors/hostile_editor.py``) from a test.

The hostile editor starts ``acp-bridge proxy`` itself, as an editor does, runs its steps and
reports each thing that happens as a JSON line; a ``sync`` step waits until the test releases
it. A flood is *stuck at the bound* when the pipes of the side that stopped reading are full,
the proxy's pipe to it too, and the proxy sleeps: :meth:`HostileEditor.wait_stuck` polls that
condition (and fails at once if the proxy's memory already passed the bound the test claims),
never a guessed delay.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psutil
import sniffio
from anyio.abc import Process

from scripts.bench.pipes import is_asleep, peak_rss_bytes, pipe_is_full
from tests.proxy.harness import ENV, ROOT, WAIT_S

HOSTILE_EDITOR = ROOT / "fixtures" / "editors" / "hostile_editor.py"
RSS_BOUND = 200 * 1000 * 1000
"""design.md: proxy RSS under 200 MB whatever a peer sends or refuses to read."""
_POLL_S = 0.02


class HostileEditor:
    def __init__(self, process: Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self._buffer = b""
        self.proxy_pid = 0

    async def event(self, name: str) -> dict[str, Any]:
        """The next reported event called ``name`` (the ones before it are kept in
        :attr:`events`)."""
        assert self.process.stdout is not None
        with anyio.fail_after(WAIT_S):
            while True:
                while b"\n" not in self._buffer:
                    chunk = await self.process.stdout.receive()
                    self._buffer += chunk
                line, _, self._buffer = self._buffer.partition(b"\n")
                event: dict[str, Any] = json.loads(line)
                self.events.append(event)
                if event["event"] == "gave_up":
                    raise AssertionError(f"the hostile editor gave up: {event}")
                if event["event"] == name:
                    return event

    async def release(self) -> None:
        """Let the editor past its ``sync`` step."""
        assert self.process.stdin is not None
        await self.process.stdin.send(b"go\n")

    @property
    def agent_pid(self) -> int:
        children = psutil.Process(self.proxy_pid).children()
        assert len(children) == 1, children
        return children[0].pid

    async def wait_stuck(self, *full_pipes: tuple[int, int]) -> None:
        """Until every pipe ``(pid, fd)`` is full and the proxy sleeps: it stopped reading the
        side that is ahead. Fails at once if the proxy's peak RSS passed :data:`RSS_BOUND`."""
        with anyio.fail_after(WAIT_S):
            while not (
                all(pipe_is_full(pid, fd) for pid, fd in full_pipes) and is_asleep(self.proxy_pid)
            ):
                peak = peak_rss_bytes(self.proxy_pid)
                assert peak < RSS_BOUND, f"the proxy grew to {peak / 2**20:.0f} MiB"
                await anyio.sleep(_POLL_S)

    def terminate_proxy(self) -> None:
        os.kill(self.proxy_pid, signal.SIGTERM)


@asynccontextmanager
async def open_hostile_editor(
    steps: Sequence[str],
    *,
    agent_argv: list[str],
    options: Sequence[str] = (),
    answers: str = "now",
) -> AsyncIterator[HostileEditor]:
    """Start the hostile editor running ``steps`` against ``acp-bridge proxy [options] --
    agent_argv`` (the proxy on the test's anyio backend). At exit a proxy still running is
    stopped with SIGTERM (it stops its agent tree), and the editor is killed."""
    argv = [sys.executable, "-u", str(HOSTILE_EDITOR), "--answers", answers]
    for step in steps:
        argv += ["--step", step]
    argv += ["--", sys.executable, "-m", "acp_bridge", "proxy", *options, "--", *agent_argv]
    backend = sniffio.current_async_library()
    process = await anyio.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        env={**ENV, "ACP_BRIDGE_PROXY_BACKEND": backend},
        cwd=str(ROOT),
        start_new_session=True,
    )
    editor = HostileEditor(process)
    try:
        editor.proxy_pid = (await editor.event("started"))["pid"]
        yield editor
    finally:
        with anyio.CancelScope(shield=True):
            if editor.proxy_pid and psutil.pid_exists(editor.proxy_pid):
                with contextlib.suppress(ProcessLookupError):
                    editor.terminate_proxy()
            assert process.stdin is not None
            await process.stdin.aclose()  # an editor waiting at a sync step ends
            with anyio.move_on_after(WAIT_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
