"""A client connected to the host: its outbox, bounded in bytes, and its output stall timer.

Everything the host fans out to a client (``session/update``, ``_acp_bridge/event``) is encoded
once and put in the client's :class:`Outbox` without waiting: the conversation never waits for
a client. A piece put may hold several whole lines (a batch of the log, joined once and shared
by the clients that see all of it). One task per client (:meth:`Outbox.pump`) hands the queued
lines to the client's connection, several at a time, in order with the connection's own
answers. A client that falls
behind is cut off, for one of two reasons, and never slows the agent or the other clients:

* its outbox would hold more than ``max_bytes`` (default :data:`DEFAULT_OUTBOX_BYTES`, 64 MiB);
* what was handed to its connection has not been written for ``stall_s`` seconds (default
  :data:`DEFAULT_STALL_S`, 60 s): it stopped reading.

Cut off, it is told why (``_acp_bridge/disconnected`` {"reason"}, if that line fits within a
short wait) and its connection is closed; it may reattach and replay from its cursor.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import anyio

from acp_bridge.core.condition import Condition
from acp_bridge.errors import BridgeError
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.wire import jsonrpc

__all__ = [
    "DEFAULT_OUTBOX_BYTES",
    "DEFAULT_STALL_S",
    "DISCONNECTED_METHOD",
    "PACE_S",
    "Client",
    "ClientLimits",
    "Connection",
    "Outbox",
]

log = logging.getLogger(__name__)

DEFAULT_OUTBOX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_STALL_S: Final = 60.0
DISCONNECTED_METHOD: Final = "_acp_bridge/disconnected"
PACE_S: Final = 0.01
"""A client is written at most once per this many seconds while updates stream (the first
update of a burst goes at once): one write and one wake-up of the client per 10 ms, not per
update, and nothing waits longer than that. Below a frame at 60 Hz, so no editor shows it."""
_WRITE_BATCH_BYTES: Final = 256 * 1024
"""Lines handed to the connection in one write, at most (about); this many queued are written
without waiting out the pace."""
_GOODBYE_S: Final = 1.0
"""How long the reason a client is cut off may wait to be written."""


@dataclass(frozen=True)
class ClientLimits:
    """Per-client bounds (documented in docs/host.md)."""

    outbox_bytes: int = DEFAULT_OUTBOX_BYTES
    stall_s: float = DEFAULT_STALL_S
    max_sessions: int = 1024
    max_id_chars: int = 1024


class Connection(Protocol):
    """How an outbox writes to its client's connection (a :class:`JsonRpcPeer`)."""

    def can_send_lines_now(self) -> bool: ...

    def send_lines_now(self, data: bytes) -> anyio.Event | None: ...

    async def send_lines(self, data: bytes, *, wait_written: bool = False) -> None: ...


class Outbox:
    """Encoded lines waiting for one client, bounded in bytes; each piece put is one or more
    whole lines.

    Writes to the client are paced: at most one per ``pace_s`` (default :data:`PACE_S`), with
    everything put meanwhile joined into it, unless :data:`_WRITE_BATCH_BYTES` pile up first.
    A piece put when the client was last written longer ago than that, with nothing queued, is
    written at once in the caller's task (a Unix socket with room takes it whole; the rest
    goes first in the connection's queue). So the first update of a burst reaches the client
    at once, a burst costs one write (and one wake-up of the client) per ``pace_s``, not one
    per update, and no client sees anything later than ``pace_s`` after it was put.
    """

    def __init__(
        self, max_bytes: int, connection: Connection | None = None, pace_s: float = PACE_S
    ) -> None:
        self.max_bytes = max_bytes
        self._connection = connection
        self._pace_s = pace_s
        self._lines: deque[bytes] = deque()
        self.queued_bytes = 0
        self.put_count = 0
        """Pieces put so far (a mark for :meth:`wait_handed`)."""
        self.handed_count = 0
        """Pieces handed to the connection so far."""
        self.changed = Condition()
        self.closed = False
        self._last_write = -math.inf
        self._writing = False  # the pump is handing a batch over
        self._pacing = False  # the pump waits out the pace with lines queued
        self._rest: anyio.Event | None = None  # set once a direct write's rest was written
        self._hurry = 0  # callers of wait_handed(): the pump writes without waiting the pace

    def put(self, line: bytes) -> bool:
        """Queue ``line`` (one or more whole lines), or write it at once (see the class);
        False (nothing queued) when it would pass the bound or is closed.

        Raises:
            BridgeError: a write at once found the connection ended.
        """
        if self.closed or self.queued_bytes + len(line) > self.max_bytes:
            return False
        self.put_count += 1
        connection = self._connection
        if (
            connection is not None
            and not self._lines
            and not self._writing
            and (self._rest is None or self._rest.is_set())
            and connection.can_send_lines_now()
        ):
            now = anyio.current_time()
            if now - self._last_write >= self._pace_s:
                self._last_write = now
                try:
                    self._rest = connection.send_lines_now(line)
                except BridgeError:
                    self.close()  # the connection ended: nothing more goes to it
                    return True
                self.handed_count += 1
                self.changed.notify_all()
                return True
        self._lines.append(line)
        self.queued_bytes += len(line)
        if not self._pacing or self.queued_bytes >= _WRITE_BATCH_BYTES:
            self.changed.notify_all()
        return True

    def close(self) -> None:
        self.closed = True
        self.changed.notify_all()

    async def wait_room(self, free: int) -> None:
        """Wait until the outbox has ``free`` bytes of room (or half its bound, if smaller),
        or is closed: a client catching up on history is fed at its own pace."""
        limit = self.max_bytes - min(free, self.max_bytes // 2)
        while self.queued_bytes > limit and not self.closed:
            await self.changed.wait()

    async def wait_handed(self, mark: int) -> bool:
        """Wait until the first ``mark`` pieces were handed to the connection; False when the
        outbox closed first."""
        if self.handed_count >= mark:
            return True
        self._hurry += 1  # what must follow these pieces is not held back by the pace
        try:
            if self._pacing:
                self.changed.notify_all()
            while self.handed_count < mark:
                if self.closed:
                    return False
                await self.changed.wait()
        finally:
            self._hurry -= 1
        return True

    async def pump(self, stall_s: float) -> str | None:
        """Hand queued lines to the connection until closed; the reason to cut the client
        off, or None.

        A hand-over is done once the lines were written to the connection's stream (or queued
        behind the connection's own lines): past ``stall_s`` the client is stalled.

        Raises:
            BridgeError: the connection ended.
        """
        connection = self._connection
        if connection is None:
            raise RuntimeError("an outbox without a connection cannot be pumped")
        while True:
            while not self._lines:
                if self.closed:
                    return None
                await self.changed.wait()
            await self._pace()
            rest = self._rest
            if rest is not None and not rest.is_set():
                with anyio.move_on_after(stall_s):
                    await rest.wait()
                if not rest.is_set():
                    return _stalled(stall_s)
            batch: list[bytes] = []
            size = 0
            while self._lines and (not batch or size + len(self._lines[0]) <= _WRITE_BATCH_BYTES):
                line = self._lines.popleft()
                batch.append(line)
                size += len(line)
            data = b"".join(batch) if len(batch) > 1 else batch[0]
            self._last_write = anyio.current_time()
            self._writing = True
            try:
                if connection.can_send_lines_now():
                    self._rest = connection.send_lines_now(data)
                else:
                    with anyio.move_on_after(stall_s) as scope:
                        await connection.send_lines(data, wait_written=True)
                    if scope.cancelled_caught:
                        return _stalled(stall_s)
            finally:
                self._writing = False
                self.queued_bytes -= size
            self.handed_count += len(batch)
            self.changed.notify_all()

    async def _pace(self) -> None:
        """Wait until the last write is ``pace_s`` old, a full batch is queued, somebody waits
        for the queued pieces to be handed over (an answer or a question follows them), or the
        outbox closed."""
        deadline = self._last_write + self._pace_s
        now = anyio.current_time()
        if now >= deadline or self.queued_bytes >= _WRITE_BATCH_BYTES or self._hurry:
            return
        self._pacing = True
        try:
            with anyio.move_on_after(deadline - now):
                while (
                    self.queued_bytes < _WRITE_BATCH_BYTES and not self.closed and not self._hurry
                ):
                    await self.changed.wait()
        finally:
            self._pacing = False


def _stalled(stall_s: float) -> str:
    return f"the client read nothing for {stall_s:g} s (output stalled)"


@dataclass(eq=False)
class Client:
    """One connection to the host: who it is, what it may answer, and its outbox."""

    number: int
    peer: JsonRpcPeer
    limits: ClientLimits
    label: str = ""
    """Shown to the other clients with its prompts (``clientInfo`` name, else ``client N``)."""
    answers_permissions: bool = True
    elicitation_modes: frozenset[str] = frozenset()
    """The elicitation modes it advertised (``form``, ``url``): the questions it is asked."""
    outbox: Outbox = field(init=False)
    cut_reason: str | None = None
    sessions: set[str] = field(default_factory=set)
    """The conversations it attached (``session/new``, ``load``, ``resume``)."""
    watching: set[str] = field(default_factory=set)
    """The conversations it watches (``_acp_bridge/watch``)."""
    _cut: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.outbox = Outbox(self.limits.outbox_bytes, self.peer)
        if not self.label:
            self.label = f"client {self.number}"

    def send(self, method: str, params: Any) -> None:
        """Queue a notification to this client (never waits); past the bound, cut it off."""
        self.put(jsonrpc.encode_message(jsonrpc.notification(method, params)))

    def put(self, line: bytes) -> None:
        if self.cut_reason is None and not self.outbox.put(line):
            self.cut_off(
                f"the client fell behind: its outbox passed {self.limits.outbox_bytes} bytes"
            )

    def cut_off(self, reason: str) -> None:
        """Disconnect the client (its task says why, then closes the connection)."""
        if self.cut_reason is None:
            self.cut_reason = reason
            log.warning("%s: disconnected: %s", self.label, reason)
        self.outbox.close()
        self._cut.set()

    async def run_output(self) -> None:
        """The client's output task: pump the outbox; when cut off, say why and close."""
        async with anyio.create_task_group() as tg:

            async def watch_cut() -> None:
                await self._cut.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch_cut)
            try:
                reason = await self.outbox.pump(self.limits.stall_s)
            except BridgeError:
                reason = None  # the connection ended
            if reason is not None:
                self.cut_off(reason)
            tg.cancel_scope.cancel()
        if self.cut_reason is not None:
            await self._goodbye(self.cut_reason)

    async def _goodbye(self, reason: str) -> None:
        with anyio.move_on_after(_GOODBYE_S, shield=True), contextlib.suppress(BridgeError):
            await self.peer.notify(DISCONNECTED_METHOD, {"reason": reason}, wait_written=True)
        await self.peer.aclose()
