"""One prompt turn: its events as an async iterator with backpressure, and its outcome.

The connection's reader delivers each ``session/update`` of the turn through a bounded memory
stream, so a consumer that reads slowly slows the reader instead of growing memory. The
consumer iterates the turn for events; iteration ends when the turn has ended, after every event
of the turn. :meth:`Turn.wait` then gives the outcome (or raises the failure), and also drains
events nobody read, so a caller that only wants the result cannot deadlock the reader.

A turn ends exactly once: by the prompt response, by an error answer, or by a failure of the
agent. On a failure (or a cancelled stop reason) every tool call the turn left open is closed
once, as ``failed``, through a :class:`ToolCallClosed` event.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any

import anyio

from acp_bridge.client.events import PermissionDecided, ToolCallClosed, TurnEvent, UpdateReceived
from acp_bridge.client.toolcalls import ToolCallTracker
from acp_bridge.wire.acp import PromptResponse

__all__ = ["Turn"]

log = logging.getLogger(__name__)


class Turn:
    """A prompt turn in progress. Iterate it for :data:`TurnEvent` s; :meth:`wait` for the end."""

    def __init__(self, session_id: str, *, buffer: int = 256) -> None:
        self.session_id = session_id
        self._send, self._receive = anyio.create_memory_object_stream[TurnEvent](
            buffer if buffer > 0 else math.inf
        )
        self._tool_calls = ToolCallTracker()
        self._done = anyio.Event()
        self._response: PromptResponse | None = None
        self._failure: BaseException | None = None
        self._started_at = time.monotonic()
        self.duration_s: float | None = None
        self.update_count = 0
        self._message_ids: set[str] = set()
        self._answered = False
        self.cancel_requested = False
        """Set when the bridge sent ``session/cancel``: open tool calls close whatever the
        agent answers (agents often answer a cancel with ``end_turn``)."""

    def __repr__(self) -> str:
        state = (
            "running"
            if not self._done.is_set()
            else (f"failed: {self._failure}" if self._failure else f"ended: {self.stop_reason}")
        )
        return f"<Turn session={self.session_id!r} [{state}, {self.update_count} updates]>"

    # -- the caller's side ------------------------------------------------------------------

    def __aiter__(self) -> Turn:
        return self

    async def __anext__(self) -> TurnEvent:
        # Take what is buffered without a scheduler pass per event (anyio's receive() always
        # checkpoints first); wait only when the buffer is empty. Measured: it is the larger
        # half of streaming cost otherwise (docs/benchmarks.md).
        try:
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            pass
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    @property
    def is_done(self) -> bool:
        return self._done.is_set()

    @property
    def stop_reason(self) -> str | None:
        return str(self._response.stop_reason) if self._response is not None else None

    async def wait(self) -> PromptResponse:
        """The prompt response, once the turn ended; unread events are discarded.

        Raises:
            AgentExitedError: the agent died during the turn.
            RpcError: the agent answered the prompt with an error.
        """
        await self.wait_quietly()
        if self._failure is not None:
            raise self._failure
        assert self._response is not None
        return self._response

    async def wait_quietly(self) -> None:
        """Wait for the end, discarding unread events; the outcome stays for :meth:`wait`."""
        if self._done.is_set():
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._discard_unread)
            await self._done.wait()
            tg.cancel_scope.cancel()

    async def _discard_unread(self) -> None:
        try:
            async for _event in self._receive:
                pass
        except anyio.ClosedResourceError:
            pass

    # -- the bridge's side ------------------------------------------------------------------

    @property
    def is_answered(self) -> bool:
        """The agent's answer was read: anything it sends from now on is late."""
        return self._answered

    def mark_answered(self) -> None:
        self._answered = True

    async def deliver_update(self, raw_update: dict[str, Any]) -> None:
        """Hand one update of this turn to the caller (waits while the buffer is full)."""
        if self._done.is_set() or not self._tool_calls.observe(raw_update):
            log.debug("dropped an update after its turn or tool call closed")
            return
        self.update_count += 1
        message_id = raw_update.get("messageId")
        if isinstance(message_id, str):
            self._message_ids.add(message_id)
        await self._emit(UpdateReceived(self.session_id, raw_update))

    @property
    def message_ids(self) -> frozenset[str]:
        """The messageIds the agent used in this turn."""
        return frozenset(self._message_ids)

    async def deliver_permission(self, decision: PermissionDecided) -> None:
        if not self._done.is_set():
            await self._emit(decision)

    async def finish(self, response: PromptResponse) -> None:
        """The agent answered the prompt. A ``cancelled`` answer closes open tool calls."""
        if self._done.is_set():
            return
        self._response = response
        if response.is_cancelled() or self.cancel_requested:
            await self._close_tool_calls("the turn was cancelled")
        self._end()

    async def fail(self, failure: BaseException) -> None:
        """The turn ended without an answer; open tool calls are closed as failed."""
        if self._done.is_set():
            return
        self._failure = failure
        await self._close_tool_calls(str(failure))
        self._end()

    async def _close_tool_calls(self, reason: str) -> None:
        for event in self.close_tool_calls(reason):
            await self._emit(event)

    def close_tool_calls(self, reason: str) -> list[ToolCallClosed]:
        """Close the open tool calls now (once: they are never closed or updated again)."""
        return [
            ToolCallClosed(self.session_id, tool_call_id, "failed", reason)
            for tool_call_id in self._tool_calls.close_all()
        ]

    async def _emit(self, event: TurnEvent) -> None:
        # Nobody listening any more (the caller left the turn) is fine. Wait only when the
        # buffer is full: that is the backpressure; a checkpoint per event is just overhead.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            try:
                self._send.send_nowait(event)
            except anyio.WouldBlock:
                await self._send.send(event)

    def _end(self) -> None:
        self.duration_s = time.monotonic() - self._started_at
        self._send.close()
        self._done.set()

    def take_buffered(self) -> list[TurnEvent]:
        """The events buffered right now, without waiting."""
        events: list[TurnEvent] = []
        while True:
            try:
                events.append(self._receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return events

    def close(self) -> None:
        """Release the event buffer: the caller reads no more events of this turn."""
        self._receive.close()

    def discard(self) -> None:
        """Release everything of a turn that never started."""
        self._send.close()
        self._receive.close()
