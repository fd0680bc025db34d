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
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from acp_bridge.core.condition import Condition
from acp_bridge.errors import BridgeError
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.wire import jsonrpc

__all__ = [
    "DEFAULT_OUTBOX_BYTES",
    "DEFAULT_STALL_S",
    "DISCONNECTED_METHOD",
    "Client",
    "ClientLimits",
    "Outbox",
]

log = logging.getLogger(__name__)

DEFAULT_OUTBOX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_STALL_S: Final = 60.0
DISCONNECTED_METHOD: Final = "_acp_bridge/disconnected"
_WRITE_BATCH_BYTES: Final = 256 * 1024
"""Lines handed to the connection in one write, at most (about)."""
_GOODBYE_S: Final = 1.0
"""How long the reason a client is cut off may wait to be written."""


@dataclass(frozen=True)
class ClientLimits:
    """Per-client bounds (documented in docs/host.md)."""

    outbox_bytes: int = DEFAULT_OUTBOX_BYTES
    stall_s: float = DEFAULT_STALL_S
    max_sessions: int = 1024
    max_id_chars: int = 1024


class Outbox:
    """Encoded lines waiting for one client, bounded in bytes; each piece put is one or more
    whole lines."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lines: deque[bytes] = deque()
        self.queued_bytes = 0
        self.put_count = 0
        """Pieces put so far (a mark for :meth:`wait_handed`)."""
        self.handed_count = 0
        """Pieces handed to the connection so far."""
        self.changed = Condition()
        self.closed = False

    def put(self, line: bytes) -> bool:
        """Queue ``line`` (one or more whole lines); False (nothing queued) when it would pass
        the bound or is closed."""
        if self.closed or self.queued_bytes + len(line) > self.max_bytes:
            return False
        self._lines.append(line)
        self.queued_bytes += len(line)
        self.put_count += 1
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
        while self.handed_count < mark:
            if self.closed:
                return False
            await self.changed.wait()
        return True

    async def pump(self, send: Callable[[bytes], Awaitable[None]], stall_s: float) -> str | None:
        """Hand lines to ``send`` until closed; the reason to cut the client off, or None.

        ``send`` returns once the lines were written to the connection's stream (or queued
        behind the connection's own lines): past ``stall_s`` the client is stalled.
        """
        while True:
            while not self._lines:
                if self.closed:
                    return None
                await self.changed.wait()
            batch: list[bytes] = []
            size = 0
            while self._lines and (not batch or size + len(self._lines[0]) <= _WRITE_BATCH_BYTES):
                line = self._lines.popleft()
                batch.append(line)
                size += len(line)
            with anyio.move_on_after(stall_s) as scope:
                await send(b"".join(batch))
            self.queued_bytes -= size
            if scope.cancelled_caught:
                return f"the client read nothing for {stall_s:g} s (output stalled)"
            self.handed_count += len(batch)
            self.changed.notify_all()


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
        self.outbox = Outbox(self.limits.outbox_bytes)
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
                reason = await self.outbox.pump(self._send, self.limits.stall_s)
            except BridgeError:
                reason = None  # the connection ended
            if reason is not None:
                self.cut_off(reason)
            tg.cancel_scope.cancel()
        if self.cut_reason is not None:
            await self._goodbye(self.cut_reason)

    async def _send(self, data: bytes) -> None:
        await self.peer.send_lines(data, wait_written=True)

    async def _goodbye(self, reason: str) -> None:
        with anyio.move_on_after(_GOODBYE_S, shield=True), contextlib.suppress(BridgeError):
            await self.peer.notify(DISCONNECTED_METHOD, {"reason": reason}, wait_written=True)
        await self.peer.aclose()
