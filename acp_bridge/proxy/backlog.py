"""The editor's messages waiting for the agent: while it restarts, or behind the one being
handed over. Bounded in messages and in bytes.

The relay's editor reader puts here what it cannot hand over at once, and one dispatcher takes
the frames in order. A frame's line is charged to the direction's
:class:`~acp_bridge.rpc.framing.ByteBudget` from :meth:`EditorBacklog.put` until the dispatcher
is :meth:`~EditorBacklog.done` with it (forwarded, answered or dropped), and the agent's writer
charges the same budget: the reader, which waits for room in it before every read, stops reading
the editor while the agent does not take what the editor sends. (A frame being handed to the
writer counts twice for that moment: the bound errs on the safe side.)

Only the lines wait, not their parsed form (which can take as much memory again): a frame is
parsed once more when it is taken, so what the budget counts is what the backlog holds.

Bounds: ``max_messages`` frames (a flood of tiny lines), and the budget's bytes.
"""

from __future__ import annotations

import anyio

from acp_bridge.proxy.frames import Frame, parse_line
from acp_bridge.rpc.framing import ByteBudget

__all__ = ["MAX_MESSAGES", "EditorBacklog"]

MAX_MESSAGES = 256
"""Frames waiting at most; at the bound :meth:`EditorBacklog.put` waits (the reader stops)."""


class EditorBacklog:
    def __init__(self, budget: ByteBudget, *, max_messages: int = MAX_MESSAGES) -> None:
        self._budget = budget
        self._send, self._receive = anyio.create_memory_object_stream[bytes](max_messages)

    def __repr__(self) -> str:
        waiting = self._receive.statistics().current_buffer_used
        return f"<EditorBacklog {waiting} frames, {self._budget!r}>"

    @property
    def is_empty(self) -> bool:
        return not self._receive.statistics().current_buffer_used

    async def put(self, frame: Frame) -> None:
        """Queue ``frame`` (charged at once); waits while ``max_messages`` frames wait.

        Raises:
            anyio.ClosedResourceError: the backlog was closed.
        """
        size = len(frame.line)
        self._budget.charge(size)
        try:
            await self._send.send(frame.line)
        except BaseException:
            self._budget.release(size)
            raise

    async def next(self) -> Frame:
        """The oldest frame (still charged until :meth:`done`).

        Raises:
            anyio.EndOfStream: the backlog was closed and every frame was taken.
        """
        return parse_line(await self._receive.receive())

    def done(self, frame: Frame) -> None:
        """The dispatcher is done with ``frame``: its bytes leave the budget."""
        self._budget.release(len(frame.line))

    def take_all(self) -> list[Frame]:
        """Every frame still waiting, in order, out of the budget (the agent is gone)."""
        frames: list[Frame] = []
        while True:
            try:
                frame = parse_line(self._receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return frames
            self.done(frame)
            frames.append(frame)

    def close(self) -> None:
        """No more frames; :meth:`next` raises EndOfStream once the waiting ones are taken."""
        self._send.close()
