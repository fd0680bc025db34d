"""Newline-delimited framing over anyio byte streams.

:class:`LineReader` reads a byte stream and hands out its lines one at a time, cut by the
I/O-free :class:`~acp_bridge.rpc.splitter.LineSplitter` (the pieces of an unfinished line are
joined once; a chunk holding ten thousand small messages is split once). Its policy at the cap:
a line over it breaks the stream (:class:`~acp_bridge.errors.FramingError`, ``fatal``), after
the lines that came before it.

:class:`LineWriter` serializes the writers of a connection: a short line is written by its caller
when the stream is idle, anything else through a queue that one task writes, several lines at a
time when they pile up. Lines never interleave, keep their order, and a cancelled caller can never
leave half a line on the wire. The queue is bounded in lines and in bytes.

:class:`ByteBudget` is the byte bound: the bytes waiting in one direction of a connection, and
how many may wait. A writer keeps one for its queue; a relay shares one between the buffers of a
direction and stops reading the side that is ahead while it is full.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
from collections import deque
from collections.abc import Callable
from typing import Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketAttribute, UNIXSocketStream

from acp_bridge.errors import ConnectionClosedError, ResourceClosedError
from acp_bridge.rpc.fdstream import direct_receive, direct_send
from acp_bridge.rpc.splitter import LineSplitter

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_QUEUED_BYTES",
    "ByteBudget",
    "LineReader",
    "LineWriter",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""ACP lines carry whole files, diffs and base64 images; 64 MiB is generous but bounded."""

DEFAULT_MAX_QUEUED_BYTES: Final = 32 * 1024 * 1024
"""Bytes a writer's queue holds before its senders wait (one line of any size always gets in):
64 MiB per connection with both directions together, the figure the TypeScript SDK's server
uses per connection."""

_RECEIVE_CHUNK_BYTES: Final = 256 * 1024
_WRITE_BATCH_BYTES: Final = 1024 * 1024
"""Lines queued together are joined into one write, up to about this many bytes."""
_ATOMIC_WRITE_BYTES: Final = select.PIPE_BUF
"""A pipe takes a write up to this size whole or not at all (POSIX): safe to write directly."""


class ByteBudget:
    """The bytes waiting in one direction of a connection, under a bound.

    Whoever keeps bytes that wait (a writer's queue, a backlog) charges them, and releases them
    once they left (written, or dropped); whoever adds to the flood waits for room first. The
    bound means "no more once this much waits": there is room while fewer than ``max_bytes``
    wait, so one line of any size always gets in, and a task that checks for room and charges
    with no await in between leaves at most ``max_bytes`` plus one line waiting.

    Raises:
        ValueError: ``max_bytes`` is not positive.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes: Final = max_bytes
        self._used = 0
        self._waiters: list[anyio.Event] = []

    def __repr__(self) -> str:
        return f"<ByteBudget {self._used}/{self.max_bytes} bytes, {len(self._waiters)} waiting>"

    @property
    def used(self) -> int:
        """The bytes charged and not released yet."""
        return self._used

    @property
    def has_room(self) -> bool:
        return self._used < self.max_bytes

    def charge(self, size: int) -> None:
        """``size`` more bytes wait (never refused: whoever adds waited for room first)."""
        self._used += size

    def release(self, size: int) -> None:
        """``size`` charged bytes left; waiters for room wake once there is some."""
        self._used -= size
        if self._waiters and self._used < self.max_bytes:
            waiters, self._waiters = self._waiters, []
            for woken in waiters:
                woken.set()  # each checks again: the first to run may fill it

    async def wait_room(self) -> None:
        """Return once fewer than ``max_bytes`` wait; at once (no checkpoint) if they do."""
        while self._used >= self.max_bytes:
            woken = anyio.Event()
            self._waiters.append(woken)
            try:
                await woken.wait()
            finally:
                with contextlib.suppress(ValueError):  # already taken by release()
                    self._waiters.remove(woken)


class LineReader:
    """Reads ``\\n``-terminated lines (returned without the newline) from a byte stream.

    A process pipe from :func:`anyio.open_process` is read through
    :func:`~acp_bridge.rpc.fdstream.direct_receive` (on trio, anyio's stream takes a scheduler
    pass before every read)."""

    def __init__(
        self, stream: ByteReceiveStream, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> None:
        self._splitter = LineSplitter(max_line_bytes)  # raises ValueError unless positive
        self._stream = direct_receive(stream)  # a process pipe is read without a pass per read
        self._lines: deque[bytes] = deque()
        self._at_eof = False
        self._too_long = False  # a line over the cap came: raised after the lines before it

    async def receive_line(self) -> bytes:
        """The next line, without its newline.

        A last line that ends without a newline at EOF is returned as a line: some writers omit
        the final newline, and a truncated message fails JSON parsing anyway.

        Raises:
            anyio.EndOfStream: the stream ended and every line was returned.
            FramingError: a line exceeded the cap (``fatal``: the stream cannot be resynchronised);
                raised once the lines before it were returned, and again on every later call.
            ConnectionClosedError: the other side broke the stream.
            ResourceClosedError: we closed the stream ourselves.
        """
        lines = self._lines
        if lines:  # the common case: a line from the last read
            return lines.popleft()
        while not lines:
            if self._too_long:
                raise self._splitter.too_long_error()
            if self._at_eof:
                raise anyio.EndOfStream
            await self._fill()
        return lines.popleft()

    async def _fill(self) -> None:
        try:
            chunk = await self._stream.receive(_RECEIVE_CHUNK_BYTES)
        except anyio.EndOfStream:
            self._at_eof = True
            last = self._splitter.end()
            if last is not None:
                log.debug("last line (%d bytes) ended without a newline", len(last))
                self._lines.append(last)
            return
        except anyio.BrokenResourceError as exc:
            raise ConnectionClosedError("the peer broke the stream") from exc
        except anyio.ClosedResourceError as exc:
            raise ResourceClosedError("the stream was already closed") from exc
        lines, self._too_long = self._splitter.feed_until_too_long(chunk)
        self._lines.extend(lines)


class LineWriter:
    """The writers of a byte stream: lines go out whole, one at a time, in order.

    A line is written directly by its sender when nothing is being written or waiting and the
    line is at most ``select.PIPE_BUF`` bytes; otherwise it joins a bounded queue that
    :meth:`run` writes, several lines per write when they pile up. A lock held for every write
    keeps lines from interleaving, and a line only goes direct when the queue is empty, so
    lines keep the order their senders handed them over.

    The direct path needs no scheduler pass, but it runs in the sender's task, so it must not
    leave half a line behind if that task is cancelled. That holds for the streams we write
    to: a write of at most ``PIPE_BUF`` bytes to a pipe is all or nothing (POSIX), asyncio
    transports buffer the whole item before their first await, memory streams take whole
    items, and :class:`~acp_bridge.rpc.fdstream.FdSendStream` finishes an item it started.
    A process pipe from :func:`anyio.open_process` is written through
    :func:`~acp_bridge.rpc.fdstream.direct_send`, so the direct path really takes no pass
    (anyio's own process streams take one per write).
    Longer lines always go through :meth:`run`, which is only cancelled when the connection
    ends.

    The queue is bounded twice: ``queue_size`` lines, and ``max_queued_bytes`` bytes (a line,
    or a batch of lines handed over as one, counts whole until it is written). At either bound
    senders wait for room: a peer that stops reading (a full pipe) slows its senders instead of
    growing memory. The byte bound is "no more once this much waits", so one line of any size
    always gets in and at most ``max_queued_bytes`` plus one line wait. ``budget``, when given,
    is charged with the queued bytes too: a relay shares it between the buffers of one
    direction. A sender that needs to know its line reached the stream passes
    ``wait_written=True``.

    Raises:
        ValueError: ``queue_size`` or ``max_queued_bytes`` is not positive.
    """

    def __init__(
        self,
        stream: ByteSendStream,
        *,
        queue_size: int = 128,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        budget: ByteBudget | None = None,
    ) -> None:
        if queue_size < 1:
            raise ValueError("queue_size must be positive")
        self._bytes = ByteBudget(max_queued_bytes)  # this queue's own bytes
        self._shared = budget
        self._stream = direct_send(stream)  # a process pipe is written without a pass
        # Our pipe streams can write an item at once or not at all (fdstream); other streams
        # (memory streams in tests, anyio's sockets) always take the awaited path.
        self._try_send_now: Callable[[bytes], bool] | None = getattr(
            self._stream, "try_send_now", None
        )
        # A Unix socket is written directly by send_now() when nothing else writes it: anyio
        # writes these with the socket's own send() on both backends and keeps nothing
        # buffered once a send returns. (Not TCP: asyncio's transport may still hold bytes.)
        self._socket: socket.socket | None = None
        if isinstance(stream, UNIXSocketStream):
            self._socket = stream.extra(SocketAttribute.raw_socket)
        self._queue: deque[tuple[bytes, anyio.Event | None]] = deque()
        self._slots = anyio.Semaphore(queue_size)  # a queued line holds a unit until written
        self._lock = anyio.Lock(fast_acquire=True)  # held by whoever is writing
        self._doorbell_send, self._doorbell = anyio.create_memory_object_stream[None](1)
        self._closed = False
        self._failure: BaseException | None = None

    async def send_line(
        self,
        line: bytes,
        *,
        wait_written: bool = False,
        fenced: Callable[[], bool] | None = None,
    ) -> bool:
        """Write one complete line (newline included), directly or through the queue.

        ``fenced``: asked once the line may be queued (after any wait for room), with no await
        between the answer and the queueing: True drops the line. A relay forwarding another
        process's line passes its fence, so a line that waited for room never lands after what
        was written once the fence went up. False when the line was dropped so.

        Raises:
            ConnectionClosedError: the stream broke, before or while this line was written.
            ResourceClosedError: the writer was closed.
        """
        self._raise_if_unusable()
        if not self._queue and not self._lock.locked() and len(line) <= _ATOMIC_WRITE_BYTES:
            # Free, so taken at once; the stream's send is this path's cancel point (taking
            # the lock with ``async with`` would check for cancellation a second time).
            if fenced is not None and fenced():
                return False
            self._lock.acquire_nowait()
            try:
                await self._write(line)
            finally:
                self._lock.release()
            return True
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            await self._slots.acquire()
        try:
            await self._bytes.wait_room()  # then charged with no await in between
        except BaseException:
            self._slots.release()
            raise
        if self._closed or self._failure is not None:
            self._slots.release()
            self._raise_if_unusable()
        if fenced is not None and fenced():
            self._slots.release()
            return False
        self._charge(len(line))
        written = anyio.Event() if wait_written else None
        self._queue.append((line, written))
        with contextlib.suppress(anyio.WouldBlock):
            self._doorbell_send.send_nowait(None)  # one ring pending is enough
        if written is not None:
            await written.wait()
            self._raise_if_failed()
        return True

    def send_line_now(self, line: bytes) -> bool:
        """Write one complete line at once, without waiting, or write nothing and return False.

        It goes out only when nothing is being written or waiting, the line is at most
        ``select.PIPE_BUF`` bytes, and the stream takes it whole right now (a pipe with room;
        streams without ``try_send_now`` never do). A caller that bounds its wait on a write
        then arms its timer only when this declines.

        Raises:
            ConnectionClosedError: the stream broke.
            ResourceClosedError: the writer was closed.
        """
        self._raise_if_unusable()
        try_send_now = self._try_send_now
        if (
            try_send_now is None
            or self._queue
            or self._lock.locked()
            or len(line) > _ATOMIC_WRITE_BYTES
        ):
            return False
        try:
            return try_send_now(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise self._broken(exc) from exc

    def can_send_now(self) -> bool:
        """Whether :meth:`send_now` may be called: the stream is a Unix socket, and nothing is
        being written, waiting, closed or broken."""
        return (
            self._socket is not None
            and not self._queue
            and not self._lock.locked()
            and not self._closed
            and self._failure is None
        )

    def send_now(self, data: bytes) -> anyio.Event | None:
        """Write ``data`` (whole lines) to the socket at once, as much as it takes; the rest,
        if any, is queued ahead of any other line and written by :meth:`run`. Only when
        :meth:`can_send_now` says so (checked, with no await in between).

        A fan-out hands the same batch to many connections: this writes it in the caller's
        task, with no hop to each connection's writer task and no wait.

        Returns:
            None when the socket took everything; otherwise an event set once the rest was
            written, or the stream broke.

        Raises:
            RuntimeError: :meth:`can_send_now` is False.
            ConnectionClosedError: the stream broke.
        """
        sock = self._socket
        if sock is None or not self.can_send_now():
            raise RuntimeError("send_now() needs an idle writer of a Unix socket")
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            raise self._broken(exc) from exc
        if sent >= len(data):
            return None
        rest = data[sent:]
        self._slots.acquire_nowait()  # the queue is empty: every slot is free
        self._charge(len(rest))
        written = anyio.Event()
        self._queue.append((rest, written))
        with contextlib.suppress(anyio.WouldBlock):
            self._doorbell_send.send_nowait(None)
        return written

    @property
    def queued_bytes(self) -> int:
        """The bytes queued and not written yet (a line being written included)."""
        return self._bytes.used

    async def wait_room(self) -> None:
        """Return once the queue has room in bytes (at once, without a checkpoint, if it has):
        a reader of the other side calls it before each read, so it stops reading while the
        queue is full instead of holding what it read."""
        await self._bytes.wait_room()

    def _charge(self, size: int) -> None:
        self._bytes.charge(size)
        if self._shared is not None:
            self._shared.charge(size)

    def _release(self, size: int) -> None:
        self._slots.release()
        self._bytes.release(size)
        if self._shared is not None:
            self._shared.release(size)

    def _raise_if_unusable(self) -> None:
        self._raise_if_failed()
        if self._closed:
            raise ResourceClosedError("the writer is closed")

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ConnectionClosedError("cannot write: the stream is broken") from self._failure

    async def _write(self, data: bytes) -> None:
        try:
            await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise self._broken(exc) from exc

    def _broken(self, exc: BaseException) -> ConnectionClosedError:
        """Record the stream's failure (the first one) and the error to raise for it."""
        if self._failure is None:
            self._failure = exc
            self._doorbell_send.close()  # wakes run(), which reports the failure
        return ConnectionClosedError("the peer stopped reading")

    async def run(self) -> None:
        """Write queued lines until :meth:`close` is called or the stream breaks.

        Raises:
            ConnectionClosedError: the stream broke; queued lines are dropped.
        """
        try:
            async for _ in self._doorbell:
                async with self._lock:
                    while self._queue:
                        await self._write_batch()
            self._raise_if_failed()
        finally:
            # Lines still queued after a failure or cancellation are dropped; their waiters
            # must still wake (and see the failure) rather than wait forever.
            self.dispose()

    async def _write_batch(self) -> None:
        batch: list[bytes] = []
        events: list[anyio.Event] = []
        size = 0
        queue = self._queue
        # Lines join one write up to about _WRITE_BATCH_BYTES; a line that would pass it goes
        # in a write of its own (joining it would copy it whole).
        while queue and (not batch or size + len(queue[0][0]) <= _WRITE_BATCH_BYTES):
            line, written = queue.popleft()
            batch.append(line)
            size += len(line)
            if written is not None:
                events.append(written)
        try:
            await self._write(b"".join(batch) if len(batch) > 1 else batch[0])
        finally:
            for line in batch:
                self._release(len(line))
            for event in events:  # on failure they see ``_failure`` and raise
                event.set()

    def close(self) -> None:
        """Stop accepting lines; :meth:`run` returns once the queue is written."""
        self._closed = True
        self._doorbell_send.close()

    def dispose(self) -> None:
        """Drop whatever is still queued and wake its waiters (idempotent).

        A task cancelled before its first step never runs its ``finally``, so the owner calls
        this once the writer's task is over.
        """
        self.close()
        self._doorbell.close()
        while self._queue:
            line, written = self._queue.popleft()
            self._release(len(line))
            if written is not None:
                written.set()
