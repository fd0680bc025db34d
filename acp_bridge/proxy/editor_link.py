"""The proxy's side toward the editor: the bounded writer of our stdout, and the recording.

Every line written to the editor is recorded first (``bridge->editor``). Lines forwarded from an
agent process go through the *fence*: :meth:`EditorLink.forward` checks that the generation is
still alive right before the write, with no await in between, so once the bridge answered for a
cancelled turn and fenced its agent, nothing more of that agent reaches the editor.

Bound: the writer's queue (:class:`~acp_bridge.rpc.framing.LineWriter`, 128 lines); when the
editor stops reading, senders wait (the agent's reader stops reading the agent: backpressure).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from anyio.abc import ByteSendStream

from acp_bridge.errors import ConnectionClosedError, ResourceClosedError
from acp_bridge.proxy.frames import Frame, FrameKind
from acp_bridge.proxy.generation import RelayGeneration
from acp_bridge.proxy.recorder import Recorder
from acp_bridge.rpc.framing import LineWriter

__all__ = ["EditorLink"]

log = logging.getLogger(__name__)


class EditorLink:
    def __init__(
        self, stream: ByteSendStream, recorder: Recorder | None, on_broken: Callable[[], None]
    ) -> None:
        self._writer = LineWriter(stream)
        self.recorder = recorder
        self._on_broken = on_broken

    async def run(self) -> None:
        try:
            await self._writer.run()
        except ConnectionClosedError:
            log.info("the editor stopped reading our stdout; shutting down")
            self._on_broken()

    def close(self) -> None:
        """No more lines; :meth:`run` returns once the queued ones are written."""
        self._writer.close()
        if self.recorder is not None:
            self.recorder.close()

    async def send(self, line: bytes) -> None:
        """Write one line (no newline) of the bridge's own, or one already fenced."""
        if self.recorder is not None:
            self.recorder.message("bridge->editor", line, valid=True)
        await self._write(line + b"\n")

    async def forward(self, gen: RelayGeneration, line: bytes) -> None:
        """Forward a line of ``gen`` unless it is fenced."""
        if gen.alive:  # the fence: checked right before the write, with no await between
            await self.send(line)

    async def forward_batch(self, gen: RelayGeneration, lines: list[bytes]) -> None:
        """Forward several lines of ``gen`` in one write unless it is fenced."""
        if not gen.alive:
            return
        if self.recorder is not None:
            for line in lines:
                self.recorder.message("bridge->editor", line, valid=True)
        lines.append(b"")  # the last newline
        await self._write(b"\n".join(lines))

    def record(self, direction: str, frame: Frame) -> None:
        if self.recorder is not None:
            self.recorder.message(direction, frame.line, valid=frame.kind is not FrameKind.INVALID)

    def event(self, event: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder.event(event)

    async def _write(self, data: bytes) -> None:
        try:
            await self._writer.send_line(data)
        except (ConnectionClosedError, ResourceClosedError):
            self._on_broken()
