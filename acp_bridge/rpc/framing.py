"""Newline-delimited framing over anyio byte streams.

:class:`LineReader` splits a byte stream into lines with a size cap. It keeps the pieces of an
unfinished line in a list and joins them once, when the newline arrives, so a 20 MB line costs
one copy instead of the quadratic ``buf += chunk`` pattern. Completed lines from one chunk are
handed out one at a time, so a chunk holding ten thousand small messages is split once.

:class:`LineWriter` is the single writer of a connection: callers hand it whole lines through a
bounded queue, and one task writes them, several at a time when they pile up, so lines never
interleave and a cancelled caller can never leave half a line on the wire.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream

from acp_bridge.errors import ConnectionClosedError, FramingError, ResourceClosedError

__all__ = ["DEFAULT_MAX_LINE_BYTES", "LineReader", "LineWriter"]

log = logging.getLogger(__name__)

DEFAULT_MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""ACP lines carry whole files, diffs and base64 images; 64 MiB is generous but bounded."""

_RECEIVE_CHUNK_BYTES: Final = 256 * 1024
_WRITE_BATCH_BYTES: Final = 1024 * 1024
"""Lines queued together are joined into one write, up to about this many bytes."""


class LineReader:
    """Reads ``\\n``-terminated lines (returned without the newline) from a byte stream."""

    def __init__(
        self, stream: ByteReceiveStream, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._stream = stream
        self._max_line_bytes = max_line_bytes
        self._lines: deque[bytes] = deque()
        self._partial: list[bytes] = []
        self._partial_len = 0
        self._at_eof = False

    async def receive_line(self) -> bytes:
        """The next line, without its newline.

        A last line that ends without a newline at EOF is returned as a line: some writers omit
        the final newline, and a truncated message fails JSON parsing anyway.

        Raises:
            anyio.EndOfStream: the stream ended and every line was returned.
            FramingError: a line exceeded the cap (``fatal``: the stream cannot be resynchronised).
            ConnectionClosedError: the other side broke the stream.
            ResourceClosedError: we closed the stream ourselves.
        """
        while not self._lines:
            if self._at_eof:
                raise anyio.EndOfStream
            await self._fill()
        return self._lines.popleft()

    async def _fill(self) -> None:
        try:
            chunk = await self._stream.receive(_RECEIVE_CHUNK_BYTES)
        except anyio.EndOfStream:
            self._at_eof = True
            if self._partial_len:
                log.debug("last line (%d bytes) ended without a newline", self._partial_len)
                self._lines.append(self._take_partial(b""))
            return
        except anyio.BrokenResourceError as exc:
            raise ConnectionClosedError("the peer broke the stream") from exc
        except anyio.ClosedResourceError as exc:
            raise ResourceClosedError("the stream was already closed") from exc
        self._split(chunk)

    def _split(self, chunk: bytes) -> None:
        end = chunk.find(b"\n")
        if end < 0:
            self._add_partial(chunk)
            return
        self._lines.append(self._take_partial(chunk[:end]))
        start = end + 1
        # The common case: many whole lines in one chunk, split with one C-level call.
        last = chunk.rfind(b"\n")
        if last > end:
            pieces = chunk[start:last].split(b"\n")
            if last - start > self._max_line_bytes:  # only then can one piece be too long
                for piece in pieces:
                    self._check_size(len(piece))
            self._lines.extend(pieces)
            start = last + 1
        if start < len(chunk):
            self._add_partial(chunk[start:])

    def _add_partial(self, piece: bytes) -> None:
        self._partial.append(piece)
        self._partial_len += len(piece)
        self._check_size(self._partial_len)

    def _take_partial(self, tail: bytes) -> bytes:
        if not self._partial:
            self._check_size(len(tail))
            return tail
        self._partial.append(tail)
        line = b"".join(self._partial)
        self._partial.clear()
        self._partial_len = 0
        self._check_size(len(line))
        return line

    def _check_size(self, size: int) -> None:
        if size > self._max_line_bytes:
            raise FramingError(f"line longer than the {self._max_line_bytes}-byte cap", fatal=True)


class LineWriter:
    """The one writer of a byte stream. ``send_line`` enqueues; :meth:`run` writes.

    The queue is bounded, so a peer that stops reading (a full pipe) eventually blocks senders
    instead of growing memory; a sender that needs to know its line reached the stream passes
    ``wait_written=True``.
    """

    def __init__(self, stream: ByteSendStream, *, queue_size: int = 128) -> None:
        self._stream = stream
        self._send, self._receive = anyio.create_memory_object_stream[
            tuple[bytes, anyio.Event | None]
        ](queue_size)
        self._failure: BaseException | None = None

    async def send_line(self, line: bytes, *, wait_written: bool = False) -> None:
        """Queue one complete line (newline included) for writing.

        Raises:
            ConnectionClosedError: the stream broke, before or while this line was written.
            ResourceClosedError: the writer was closed.
        """
        self._raise_if_failed()
        written = anyio.Event() if wait_written else None
        try:
            await self._send.send((line, written))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            self._raise_if_failed()
            raise ResourceClosedError("the writer is closed") from exc
        if written is not None:
            await written.wait()
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ConnectionClosedError("cannot write: the stream is broken") from self._failure

    async def run(self) -> None:
        """Write queued lines until :meth:`close` is called or the stream breaks.

        Raises:
            ConnectionClosedError: the stream broke; queued lines are dropped.
        """
        try:
            async for line, written in self._receive:
                await self._write_batch(line, written)
        finally:
            # Lines still queued after a failure or cancellation are dropped; their waiters
            # must still wake (and see the failure) rather than wait forever.
            self._send.close()
            for _line, written in _drain(self._receive):
                if written is not None:
                    written.set()
            self._receive.close()

    async def _write_batch(self, line: bytes, written: anyio.Event | None) -> None:
        batch = [line]
        events = [written] if written is not None else []
        size = len(line)
        while size < _WRITE_BATCH_BYTES:
            try:
                line, written = self._receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            batch.append(line)
            size += len(line)
            if written is not None:
                events.append(written)
        try:
            await self._stream.send(b"".join(batch) if len(batch) > 1 else batch[0])
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self._failure = exc
            raise ConnectionClosedError("the peer stopped reading") from exc
        finally:
            # Wake every waiter: on failure they see ``_failure`` and raise.
            for event in events:
                event.set()

    def close(self) -> None:
        """Stop accepting lines; :meth:`run` returns once the queue is written."""
        self._send.close()

    def dispose(self) -> None:
        """Release the queue even if :meth:`run` never got to start (idempotent).

        A task cancelled before its first step never runs its ``finally``, so the owner calls
        this once the writer's task is over.
        """
        self._send.close()
        for _line, written in _drain(self._receive):
            if written is not None:
                written.set()
        self._receive.close()


def _drain(
    receive: MemoryObjectReceiveStream[tuple[bytes, anyio.Event | None]],
) -> list[tuple[bytes, anyio.Event | None]]:
    items = []
    while True:
        try:
            items.append(receive.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return items
