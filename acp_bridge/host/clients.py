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

Cut off, it is detached from its conversations at once (it is asked nothing more, and its
requests are refused), and it is told why (``_acp_bridge/disconnected`` {"reason"}) after what
was already handed to its connection: a client that stopped reading and reads again gets the
rest of that, then the reason. Its connection is closed once the reason is written, or after
``stall_s`` without that; it may reattach and replay from its cursor.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable
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
    "Pacer",
]

log = logging.getLogger(__name__)

DEFAULT_OUTBOX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_STALL_S: Final = 60.0
DISCONNECTED_METHOD: Final = "_acp_bridge/disconnected"
PACE_S: Final = 0.01
"""While updates stream, a client is written at most once per this many seconds (the first
update of a burst goes at once): one write and one wake-up of the client per 10 ms, not per
update, and nothing waits longer than that. Below a frame at 60 Hz, so no editor shows it."""
_WRITE_BATCH_BYTES: Final = 256 * 1024
"""Lines handed to the connection in one write, at most (about); this many queued are written
without waiting for the pace."""


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


class Pacer:
    """The one clock of the paced writes of many outboxes (the clients of one endpoint).

    Time is cut into periods of ``period_s`` (default :data:`PACE_S`). An outbox written in
    the current period holds what is put next (:meth:`hold`) until the period ends; then
    :meth:`run` releases every held outbox in one pass, and each writes what it holds. A
    period starts with the first write after a quiet spell, so the first update of a burst
    goes at once. The clients of one conversation are written in the same pass (one
    timer for all of them, not one per client: a timer's wake-up is what a fan-out to ten
    clients paid ten times, about 0.1 ms each on a small virtual machine).

    Until :meth:`run` runs, nothing is held (each put is written as soon as the connection
    can take it).
    """

    def __init__(
        self, period_s: float = PACE_S, *, clock: Callable[[], float] = anyio.current_time
    ) -> None:
        self.period_s = period_s
        self._clock = clock
        self.running = False
        self.passes = 0
        """Release passes so far (each one wake-up of :meth:`run`)."""
        self._period = 0
        self._ends = -math.inf
        self._held: dict[Outbox, None] = {}
        self._changed = Condition()

    def period(self) -> int:
        """The current period's number (a new period starts when the last one ended and
        nothing is held for its end)."""
        if not self._held:
            now = self._clock()
            if now >= self._ends:
                self._period += 1
                self._ends = now + self.period_s
        return self._period

    def hold(self, outbox: Outbox) -> None:
        """Release ``outbox`` (:meth:`Outbox.release`) when the current period ends."""
        if not self._held:
            self._changed.notify_all()
        self._held[outbox] = None

    async def run(self) -> None:
        """Release the held outboxes at the end of each period, until cancelled (then at once:
        nothing stays held)."""
        self.running = True
        try:
            while True:
                while not self._held:
                    await self._changed.wait()
                delay = self._ends - self._clock()
                if delay > 0:
                    await anyio.sleep(delay)  # a plain timer: no cancel scope to enter
                self.passes += 1
                self._period += 1
                self._ends = self._clock() + self.period_s
                self._release_all()
        finally:
            self.running = False
            self._release_all()

    def _release_all(self) -> None:
        held, self._held = self._held, {}
        for outbox in held:
            outbox.release()


class Outbox:
    """Encoded lines waiting for one client, bounded in bytes; each piece put is one or more
    whole lines.

    A piece put with nothing queued, when the connection is idle and the client was not
    written in the :class:`Pacer`'s current period, is written at once in the caller's task
    (a Unix socket with room takes it whole; the rest goes first in the connection's queue).
    Otherwise it is queued:

    * behind the pace (the client was written in this period): held until the period ends,
      then written with everything put meanwhile joined into it; so a burst costs one write
      and one wake-up of the client per period, not one per update;
    * for the pump (:meth:`pump`, the client's own task) when the connection is busy or
      cannot be written from another task (a WebSocket: the first piece of a period goes to
      the pump at once, the rest is held as above), a full batch
      (:data:`_WRITE_BATCH_BYTES`) is queued, or somebody waits for the pieces to be handed
      over (:meth:`wait_handed`: an answer or a question follows them).

    Without a running pacer nothing is held.
    """

    def __init__(
        self, max_bytes: int, connection: Connection | None = None, pacer: Pacer | None = None
    ) -> None:
        self.max_bytes = max_bytes
        self._connection = connection
        self._pacer = pacer
        self._lines: deque[bytes] = deque()
        self.queued_bytes = 0
        self.put_count = 0
        """Pieces put so far (a mark for :meth:`wait_handed`)."""
        self.handed_count = 0
        """Pieces handed to the connection so far."""
        self.changed = Condition()
        """Notified when pieces were handed over (room made) or the outbox closed."""
        self.closed = False
        self._queued = Condition()  # the pump's: lines became ready, or the outbox closed
        self._ready = False  # the queued lines are the pump's to write now (not held)
        self._held = False  # the pacer holds the queued lines until its period ends
        self._period = 0  # the pacer's period of the last write (0: none yet)
        self._writing = False  # the pump is handing a batch over
        self._rest: anyio.Event | None = None  # set once a direct write's rest was written

    @property
    def held(self) -> bool:
        """Whether queued lines wait for the pacer's period to end."""
        return self._held and not self._ready and bool(self._lines)

    def put(self, line: bytes) -> bool:
        """Queue ``line`` (one or more whole lines), or write it at once (see the class);
        False (nothing queued) when it would pass the bound or is closed.
        """
        if self.closed or self.queued_bytes + len(line) > self.max_bytes:
            return False
        self.put_count += 1
        pacer = self._pacer if self._pacer is not None and self._pacer.running else None
        free = self._free()
        first = False  # the first piece of a period: not held
        if free and not self._lines:
            period = 0 if pacer is None else pacer.period()
            if pacer is None or period != self._period:
                self._period = period
                if self._idle():
                    self._write_now(line, 1)
                    return True
                first = True  # a stream written only by its task (WebSocket): to the pump
        self._lines.append(line)
        self.queued_bytes += len(line)
        if self._ready or self.closed:
            return True  # the pump writes it with the rest
        if not first and free and pacer is not None and self.queued_bytes < _WRITE_BATCH_BYTES:
            if not self._held:
                self._held = True
                pacer.hold(self)
            return True
        self._to_pump()
        return True

    def release(self) -> None:
        """The pacer's period ended: write what is held (see the class)."""
        self._held = False
        if not self._lines or self._ready or self.closed:
            return
        if not self._idle():
            self._to_pump()
            return
        if self._pacer is not None:
            self._period = self._pacer.period()
        data, count, size = self._take_batch()
        self.queued_bytes -= size
        self._write_now(data, count)
        if self._lines and not self.closed:
            self._to_pump()  # more than a batch: the pump writes the rest now

    def close(self) -> None:
        self.closed = True
        self._queued.notify_all()
        self.changed.notify_all()

    async def wait_room(self, free: int) -> None:
        """Wait until the outbox has ``free`` bytes of room (or half its bound, if smaller),
        or is closed: a client catching up on history is fed at its own pace."""
        limit = self.max_bytes - min(free, self.max_bytes // 2)
        while self.queued_bytes > limit and not self.closed:
            await self.changed.wait()

    async def wait_handed(self, mark: int) -> bool:
        """Wait until the first ``mark`` pieces were handed to the connection; False when the
        outbox closed first. Held pieces go to the pump at once: what must follow them is not
        held back by the pace."""
        if self.handed_count >= mark:
            return True
        if self._lines and not self._ready:
            self._to_pump()
        while self.handed_count < mark:
            if self.closed:
                return False
            await self.changed.wait()
        return True

    async def pump(self, stall_s: float) -> str | None:
        """Write the lines given to the pump until closed; the reason to cut the client off,
        or None.

        A hand-over is done once the lines were written to the connection's stream (or queued
        behind the connection's own lines): past ``stall_s`` the client is stalled.

        Raises:
            BridgeError: the connection ended.
        """
        connection = self._connection
        if connection is None:
            raise RuntimeError("an outbox without a connection cannot be pumped")
        while True:
            while not (self._ready and self._lines):
                if self.closed:
                    return None
                self._ready = False
                await self._queued.wait()
            rest = self._rest
            if rest is not None and not rest.is_set():
                with anyio.move_on_after(stall_s):
                    await rest.wait()
                if not rest.is_set():
                    return _stalled(stall_s)
            data, count, size = self._take_batch()
            if self._pacer is not None and self._pacer.running:
                self._period = self._pacer.period()
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
            self.handed_count += count
            self.changed.notify_all()

    def _free(self) -> bool:
        """Whether nothing of ours is being written (the pump's batch, a direct write's rest)."""
        return not self._writing and (self._rest is None or self._rest.is_set())

    def _idle(self) -> bool:
        """Whether a write may go to the connection at once, in the caller's task."""
        connection = self._connection
        return connection is not None and self._free() and connection.can_send_lines_now()

    def _to_pump(self) -> None:
        self._ready = True
        self._queued.notify_all()

    def _take_batch(self) -> tuple[bytes, int, int]:
        """The next batch of queued lines, joined (at most about :data:`_WRITE_BATCH_BYTES`):
        (its bytes, pieces, size); still counted in :attr:`queued_bytes`."""
        batch: list[bytes] = []
        size = 0
        while self._lines and (not batch or size + len(self._lines[0]) <= _WRITE_BATCH_BYTES):
            line = self._lines.popleft()
            batch.append(line)
            size += len(line)
        return (b"".join(batch) if len(batch) > 1 else batch[0]), len(batch), size

    def _write_now(self, data: bytes, count: int) -> None:
        """Write ``data`` (``count`` pieces) at once; a connection found ended closes the
        outbox (nothing more goes to it)."""
        assert self._connection is not None
        try:
            self._rest = self._connection.send_lines_now(data)
        except BridgeError:
            self.close()
            return
        self.handed_count += count
        self.changed.notify_all()


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
    pacer: Pacer | None = None
    """The endpoint's clock for paced writes (see :class:`Pacer`)."""
    on_cut: Callable[[], None] | None = None
    """Called once, in the client's output task, when it was cut off (the endpoint detaches
    it from its conversations)."""
    _cut: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.outbox = Outbox(self.limits.outbox_bytes, self.peer, self.pacer)
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
            if self.on_cut is not None:
                self.on_cut()
            await self._goodbye(self.cut_reason)

    async def _goodbye(self, reason: str) -> None:
        """Say why, after what was handed over already, waiting at most ``stall_s`` for it to
        be written (a host that stops does not wait); then close the connection."""
        try:
            with anyio.move_on_after(self.limits.stall_s), contextlib.suppress(BridgeError):
                await self.peer.notify(DISCONNECTED_METHOD, {"reason": reason}, wait_written=True)
        finally:
            with anyio.CancelScope(shield=True):
                await self.peer.aclose()
