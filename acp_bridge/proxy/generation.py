"""One agent process of the proxy (a *generation*): its writer, its end, the bridge's own calls.

A generation *ends* exactly once, for the first reason that comes: the process exited, its
stdout closed or broke, its stdin stopped taking lines, the restore failed, or it was
quarantined. From that moment it is *fenced*: nothing it writes is forwarded to the editor any
more (a cancelled turn's late updates never reach the editor after the bridge answered for
it), and the bridge's own calls waiting on it fail.

Bound: the writer's queue, in bytes (``budget``, the proxy's ``--max-buffer-bytes``) and 128
lines; the relay's editor reader waits for room in the same budget before every read.

The bridge's own requests (``initialize``, ``authenticate``, ``session/load``,
``session/resume`` after a restart) carry string ids ``acp-bridge/proxy-N``; see
:mod:`.routing` for why they cannot collide with the editor's.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import anyio

from acp_bridge.errors import ConnectionClosedError, ResourceClosedError
from acp_bridge.process.launcher import AgentProcess
from acp_bridge.proxy.frames import Frame, IdKey, id_key
from acp_bridge.proxy.routing import OWN_ID_PREFIX
from acp_bridge.rpc.framing import DEFAULT_MAX_QUEUED_BYTES, ByteBudget, LineWriter

__all__ = ["GenerationEnded", "RelayGeneration"]

_own_ids = itertools.count(1)


class GenerationEnded(Exception):
    """The generation ended while the bridge waited for its answer."""


class _OwnCall:
    def __init__(self) -> None:
        self.done = anyio.Event()
        self.reply: Frame | None = None


class RelayGeneration:
    def __init__(
        self,
        number: int,
        process: AgentProcess,
        *,
        restoring: bool,
        on_send: Callable[[bytes, bool], None] | None = None,
        budget: ByteBudget | None = None,
    ) -> None:
        self.number = number
        self.quarantined = False
        self.pid = process.pid
        self.on_send = on_send
        """Called with every line before it is written (the recording)."""
        self.process = process
        self.writer = LineWriter(
            process.stdin,
            max_queued_bytes=DEFAULT_MAX_QUEUED_BYTES if budget is None else budget.max_bytes,
            budget=budget,
        )
        """Bounded by ``budget``'s bytes, and charges them to it (shared with the relay's
        backlog: the bytes on their way to the agent)."""
        self.restoring = restoring
        """While True, the agent's ``session/update`` notifications are a load's replay."""
        self.end_reason: str | None = None
        self._ended = anyio.Event()
        self._own: dict[IdKey, _OwnCall] = {}

    def __repr__(self) -> str:
        return f"<RelayGeneration {self.number} pid={self.process.pid} end={self.end_reason!r}>"

    @property
    def alive(self) -> bool:
        """Not fenced: what it writes is still forwarded."""
        return self.end_reason is None

    def end(self, reason: str) -> None:
        """Fence the generation and wake everyone waiting on it (idempotent: the first reason
        stays)."""
        if self.end_reason is not None:
            return
        self.end_reason = reason
        self._ended.set()
        for call in self._own.values():
            call.done.set()
        self._own.clear()

    def quarantine(self, reason: str) -> None:
        """End it and SIGKILL its tree now (the graceful stop then only reaps). The exit is
        ``ordered`` (see :class:`ExitRecord`): it does not count against the restart limit."""
        self.quarantined = True
        self.end(reason)
        self.process.kill_now()

    async def wait_ended(self) -> None:
        await self._ended.wait()

    async def run_writer(self) -> None:
        """Write the queued lines to the agent, until its stdin breaks or this is cancelled.

        A pipe write finishes a line it has started, shielded (no half line is ever left in the
        pipe), so a write to an agent that stopped reading would never end, and this generation
        would never be over. When the generation ends (or this is cancelled), the agent's stdin
        is closed, as its stop begins anyway: that ends such a write."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._close_stdin_at_end)
            try:
                await self.writer.run()
            except ConnectionClosedError:
                self.end("it stopped reading its stdin")
            finally:
                tg.cancel_scope.cancel()

    async def _close_stdin_at_end(self) -> None:
        try:
            await self._ended.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self.process.stdin.aclose()

    async def call(self, method: str, params: dict[str, Any]) -> Frame:
        """Send the bridge's own request and wait for its response frame.

        Raises:
            GenerationEnded: the process went away first.
        """
        if not self.alive:
            raise GenerationEnded(self.end_reason)
        request_id = f"{OWN_ID_PREFIX}proxy-{next(_own_ids)}"
        call = _OwnCall()
        self._own[id_key(request_id)] = call
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        await self.send(line)
        await call.done.wait()
        if call.reply is None:
            raise GenerationEnded(self.end_reason)
        return call.reply

    def take_own_reply(self, frame: Frame) -> bool:
        """Whether ``frame`` answers one of the bridge's own requests (then it is consumed)."""
        call = self._own.pop(frame.key, None)
        if call is None:
            return False
        call.reply = frame
        call.done.set()
        return True

    async def send(self, line: bytes, *, valid: bool = True) -> bool:
        """Write one line (without its newline) to the agent; a broken pipe ends the
        generation instead of raising. ``valid``: the line is JSON (for the recording).

        False when the line was refused at once (the pipe broken or the writer closed): the
        agent never saw it. True when it was written or queued for the writer (a queued line
        the pipe refuses later ends the generation too, but it cannot be told apart)."""
        if self.on_send is not None:
            self.on_send(line, valid)
        try:
            await self.writer.send_line(line + b"\n")
        except (ConnectionClosedError, ResourceClosedError):
            self.end("it stopped reading its stdin")
            return False
        return True
