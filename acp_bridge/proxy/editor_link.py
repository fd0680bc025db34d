"""The proxy's side toward the editor: the bounded writer of our stdout, and the recording.

Every line written to the editor is recorded first (``bridge->editor``). Lines forwarded from an
agent process go through the *fence*: :meth:`EditorLink.forward` checks that the generation is
still alive right before the write, with no await in between, so once the bridge answered for a
cancelled turn and fenced its agent, nothing more of that agent reaches the editor.

Bound: the writer's queue (:class:`~acp_bridge.rpc.framing.LineWriter`), ``max_queued_bytes``
(the proxy's ``--max-buffer-bytes``) and 128 lines; a batch of updates forwarded in one write
counts whole. When the editor stops reading, senders wait, and the agent's reader, which waits
for room before every read (:meth:`EditorLink.wait_room`), stops reading the agent
(backpressure): at most the bound plus one line, and the read in hand, wait for the editor.

Shutdown: :meth:`EditorLink.close` stops taking lines; :meth:`EditorLink.flush` gives the queued
ones a bounded time to go out, then closes the stream, which ends a write stuck in the middle of
a line (an editor that stopped reading would otherwise hold the proxy for ever).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import ByteSendStream

from acp_bridge.errors import ConnectionClosedError, ResourceClosedError
from acp_bridge.proxy.frames import Frame, FrameKind
from acp_bridge.proxy.generation import RelayGeneration
from acp_bridge.proxy.recorder import Recorder
from acp_bridge.rpc.framing import DEFAULT_MAX_QUEUED_BYTES, LineWriter

__all__ = ["EditorLink"]

log = logging.getLogger(__name__)


class EditorLink:
    def __init__(
        self,
        stream: ByteSendStream,
        recorder: Recorder | None,
        on_broken: Callable[[], None],
        *,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
    ) -> None:
        self._stream = stream
        self._writer = LineWriter(stream, max_queued_bytes=max_queued_bytes)
        self.recorder = recorder
        self._on_broken = on_broken
        self._done = anyio.Event()
        self._abandoned = False  # flush() gave up on the editor and closed the stream

    async def run(self) -> None:
        try:
            await self._writer.run()
        except ConnectionClosedError:
            if not self._abandoned:
                log.info("the editor stopped reading our stdout; shutting down")
            self._on_broken()
        finally:
            self._done.set()

    def close(self) -> None:
        """No more lines; :meth:`run` returns once the queued ones are written."""
        self._writer.close()
        if self.recorder is not None:
            self.recorder.close()

    async def flush(self, bound_s: float) -> None:
        """After :meth:`close`: wait up to ``bound_s`` for :meth:`run` to write what is queued,
        then drop the rest and close the stream (a write stuck mid-line then ends)."""
        try:
            with anyio.move_on_after(bound_s):
                await self._done.wait()
        finally:  # cancelled too: a write stuck mid-line would hold its task group for ever
            if not self._done.is_set():
                log.info("the editor did not take our last lines within %g s; dropped", bound_s)
                self._abandoned = True
                with anyio.CancelScope(shield=True):
                    await self._stream.aclose()

    async def wait_room(self) -> None:
        """Until fewer than the bound's bytes wait for the editor (at once if they do)."""
        await self._writer.wait_room()

    async def send(self, line: bytes) -> None:
        """Write one line (no newline) of the bridge's own, or one already fenced."""
        await self._write(line + b"\n", [line])

    async def forward(self, gen: RelayGeneration, line: bytes) -> None:
        """Forward a line of ``gen`` unless it is fenced, by the time it would be queued."""
        if gen.alive:
            await self._write(line + b"\n", [line], fence=gen)

    async def forward_batch(self, gen: RelayGeneration, lines: list[bytes]) -> None:
        """Forward several lines of ``gen`` in one write unless it is fenced, by the time they
        would be queued."""
        if gen.alive:
            await self._write(b"\n".join([*lines, b""]), lines, fence=gen)

    def record(self, direction: str, frame: Frame) -> None:
        if self.recorder is not None:
            self.recorder.message(direction, frame.line, valid=frame.kind is not FrameKind.INVALID)

    def event(self, event: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder.event(event)

    async def _write(
        self, data: bytes, lines: list[bytes], fence: RelayGeneration | None = None
    ) -> None:
        """Queue ``data`` (``lines``, for the recording). A line of a generation is checked
        against its fence once it may be queued, after any wait for room: the bridge's answer
        for a cancelled turn, written once the fence went up, is never followed by a line of
        that turn that waited for room meanwhile."""
        fenced = None if fence is None else (lambda: not fence.alive)
        try:
            sent = await self._writer.send_line(data, fenced=fenced)
        except (ConnectionClosedError, ResourceClosedError):
            self._on_broken()
            return
        if sent and self.recorder is not None:
            for line in lines:
                self.recorder.message("bridge->editor", line, valid=True)
