"""anyio byte streams over raw file descriptors (pipes), on any backend.

An agent's pipes come from :func:`anyio.open_process`. The other end of the bridge, our own
stdin and stdout (an editor talking to ``acp-bridge proxy``, or a served agent), are plain file
descriptors, which anyio does not wrap. These streams put the descriptor in non-blocking mode and
wait with :func:`anyio.wait_readable` / :func:`anyio.wait_writable`, so they run on asyncio and
trio alike without a thread.

The descriptor's blocking mode is restored on :meth:`aclose`. The descriptor itself is closed only
when ``close_fd=True``: stdin and stdout belong to the process, not to the stream. Non-blocking
mode applies to the whole open file description, so another process sharing a terminal would
see it too; these streams are meant for pipes.

:func:`direct_receive` and :func:`direct_send` give the line reader and writer the same
pass-free reads and writes over the pipes of :func:`anyio.open_process`: anyio's own process
streams spend a full scheduler pass per call (a checkpoint before every trio read and write,
and after every asyncio write), which is most of a small message's cost. They read and write
the very same pipe, with the same cancel guarantees as above, and leave closing to the
stream they stand in for.
"""

from __future__ import annotations

import os
import select
import stat
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, ByteSendStream

__all__ = ["FdReceiveStream", "FdSendStream", "direct_receive", "direct_send"]

_READS_PER_YIELD = 16
"""Reads served straight from a non-empty pipe before one full scheduler pass."""


class _FdStream:
    def __init__(self, fd: int, *, close_fd: bool) -> None:
        self._fd = fd
        self._close_fd = close_fd
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
        self._closed = False

    def fileno(self) -> int:
        return self._fd

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        anyio.notify_closing(self._fd)  # wakes a task blocked in wait_readable/writable
        try:
            os.set_blocking(self._fd, self._was_blocking)
            if self._close_fd:
                os.close(self._fd)
        except OSError:
            pass  # already closed elsewhere: nothing left to restore
        await anyio.lowlevel.checkpoint()

    def _check_open(self) -> None:
        if self._closed:
            raise anyio.ClosedResourceError

    def _open_fd(self) -> int:
        """The descriptor to use now; raises ClosedResourceError once the stream is closed."""
        self._check_open()
        return self._fd


class FdReceiveStream(_FdStream, ByteReceiveStream):
    """Reads from a pipe's file descriptor."""

    # anyio's, which look up the backend on every call; a trio pipe uses trio's own.
    _checkpoint: Callable[[], Awaitable[None]] = staticmethod(anyio.lowlevel.checkpoint)
    _checkpoint_if_cancelled: Callable[[], Awaitable[None]] = staticmethod(
        anyio.lowlevel.checkpoint_if_cancelled
    )
    _wait_readable: Callable[[int], Awaitable[None]] = staticmethod(anyio.wait_readable)

    def __init__(self, fd: int, *, close_fd: bool = False) -> None:
        super().__init__(fd, close_fd=close_fd)
        self._reads_since_yield = 0

    async def receive(self, max_bytes: int = 65536) -> bytes:
        # Every receive is a cancel point, and once os.read has taken bytes out of the pipe no
        # await may follow, or a cancellation there would lose them: the checks come first.
        # When data is already waiting, the check need not yield to the scheduler (a pass per
        # read costs a busy pipe dearly); a full checkpoint every few reads keeps a reader of
        # a pipe that is never empty from starving the other tasks. wait_readable is the only
        # other await, and it runs before the read it guards.
        if self._reads_since_yield >= _READS_PER_YIELD:
            self._reads_since_yield = 0
            await self._checkpoint()
        else:
            await self._checkpoint_if_cancelled()
        while True:
            fd = self._open_fd()
            try:
                data = os.read(fd, max_bytes)
            except BlockingIOError:
                self._reads_since_yield = 0
                await self._wait_readable(fd)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            self._reads_since_yield += 1
            return data


class FdSendStream(_FdStream, ByteSendStream):
    """Writes to a pipe's file descriptor."""

    def __init__(self, fd: int, *, close_fd: bool = False) -> None:
        super().__init__(fd, close_fd=close_fd)
        self._is_fifo = _is_fifo(fd)

    def try_send_now(self, item: bytes) -> bool:
        """Write all of ``item`` now if the pipe takes it without waiting; otherwise write
        nothing and return False. Only a pipe and an item of at most ``PIPE_BUF`` bytes qualify
        (POSIX makes that write all or nothing); anything else returns False."""
        if not self._is_fifo or len(item) > select.PIPE_BUF:
            return False
        fd = self._open_fd()
        try:
            os.write(fd, item)
        except BlockingIOError:
            return False
        except OSError as exc:  # EPIPE above all: the reader is gone
            raise anyio.BrokenResourceError from exc
        return True

    async def send(self, item: bytes) -> None:
        """Write all of ``item``. Cancellation takes effect only before the first byte: once
        part of an item is written the rest follows, shielded, so a cancelled sender never
        leaves half a message in the pipe. :meth:`aclose` still ends a stuck write.

        A write the pipe takes at once does not yield to the scheduler (it is still a cancel
        point): senders are the JSON-RPC writer, which yields while it waits for lines.
        """
        view = memoryview(item)
        await anyio.lowlevel.checkpoint_if_cancelled()
        while view:
            fd = self._open_fd()
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                if len(view) == len(item):
                    await anyio.wait_writable(fd)
                else:
                    with anyio.CancelScope(shield=True):
                        await anyio.wait_writable(fd)
                continue
            except OSError as exc:  # EPIPE above all: the reader is gone
                raise anyio.BrokenResourceError from exc
            view = view[written:]

    async def send_eof(self) -> None:
        await self.aclose()


# -- the pipes of anyio.open_process, without anyio's extra scheduler passes -----------------


def direct_receive(stream: ByteReceiveStream) -> ByteReceiveStream:
    """A pass-free reader of ``stream``'s pipe when ``stream`` is a trio process pipe from
    :func:`anyio.open_process`; otherwise ``stream`` itself (asyncio's process streams already
    read without a pass, and other streams are left alone)."""
    inner = _trio_pipe(stream, "receive_some")
    return stream if inner is None else _TrioPipeReceive(stream, inner)


def direct_send(stream: ByteSendStream) -> ByteSendStream:
    """A pass-free writer of ``stream``'s pipe when ``stream`` is a process pipe from
    :func:`anyio.open_process` (either backend); otherwise ``stream`` itself."""
    inner = _trio_pipe(stream, "send_all")
    if inner is not None:
        return _TrioPipeSend(stream, inner)
    writer = _asyncio_writer(stream)
    return stream if writer is None else _AsyncioPipeSend(stream, writer)


def _is_fifo(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def _trio_pipe(stream: Any, method: str) -> Any:
    """anyio's trio wrapper holds a ``trio.lowlevel.FdStream`` in ``_stream``; only a pipe
    qualifies (a write of at most PIPE_BUF bytes is then all or nothing)."""
    if type(stream).__module__ != "anyio._backends._trio":
        return None
    trio = sys.modules.get("trio")
    inner = getattr(stream, "_stream", None)
    if trio is None or not isinstance(inner, trio.lowlevel.FdStream) or not hasattr(inner, method):
        return None
    fd = inner.fileno()
    return inner if fd >= 0 and _is_fifo(fd) else None


def _asyncio_writer(stream: Any) -> Any:
    if type(stream).__module__ != "anyio._backends._asyncio":
        return None
    asyncio = sys.modules.get("asyncio")
    writer = getattr(stream, "_stream", None)
    if asyncio is None or not isinstance(writer, asyncio.StreamWriter):
        return None
    return writer


class _TrioPipe:
    """A trio process pipe used as an :class:`_FdStream`. The descriptor is asked of trio's
    stream before every use: trio sets it to -1 when it closes it, so a closed (and perhaps
    reused) descriptor number is never touched; a wait at that moment is woken with
    ClosedResourceError (trio notifies waiters before it closes). Closing closes anyio's
    stream, which owns the descriptor."""

    _closed: bool

    def _wrap(self, outer: ByteReceiveStream | ByteSendStream, inner: Any) -> None:
        self._outer = outer
        self._inner = inner
        self._fd = inner.fileno()
        self._close_fd = False
        self._closed = False

    def _open_fd(self) -> int:
        fd: int = self._inner.fileno()
        if self._closed or fd < 0:
            raise anyio.ClosedResourceError
        return fd

    async def aclose(self) -> None:
        self._closed = True
        await self._outer.aclose()


class _TrioPipeReceive(_TrioPipe, FdReceiveStream):
    """Reads a trio process pipe as :class:`FdReceiveStream` does (see :class:`_TrioPipe`)."""

    def __init__(self, outer: ByteReceiveStream, inner: Any) -> None:
        self._wrap(outer, inner)
        self._reads_since_yield = 0
        # What anyio would call on trio, minus its backend lookup per call (a pipe is read
        # once per line the agent writes).
        self._trio = trio = sys.modules["trio"]
        self._checkpoint = trio.lowlevel.checkpoint
        self._checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
        self._wait_readable = self._wait_readable_mapped

    async def _wait_readable_mapped(self, fd: int) -> None:
        trio = self._trio
        try:
            await trio.lowlevel.wait_readable(fd)
        except trio.ClosedResourceError:  # as anyio maps it
            raise anyio.ClosedResourceError from None
        except trio.BusyResourceError:
            raise anyio.BusyResourceError("reading from") from None


class _TrioPipeSend(_TrioPipe, FdSendStream):
    """Writes a trio process pipe as :class:`FdSendStream` does (see :class:`_TrioPipe`)."""

    def __init__(self, outer: ByteSendStream, inner: Any) -> None:
        self._wrap(outer, inner)
        self._is_fifo = True  # _trio_pipe qualifies only pipes


class _AsyncioPipeSend(ByteSendStream):
    """anyio's asyncio process stdin minus the checkpoint it takes after every write. The
    transport takes the whole item before the first await (so a cancelled sender never leaves
    half of it), and ``drain`` waits only while the pipe is backed up."""

    def __init__(self, outer: ByteSendStream, writer: Any) -> None:
        self._outer = outer
        self._writer = writer
        self._closed = False

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise anyio.ClosedResourceError
        writer = self._writer
        try:
            writer.write(item)
            await writer.drain()
        except (ConnectionResetError, BrokenPipeError, RuntimeError) as exc:
            # The same mapping as anyio's own wrapper: we closed it, or the pipe broke.
            if self._closed or getattr(self._outer, "_closed", False):
                raise anyio.ClosedResourceError from exc
            if writer.is_closing():
                raise anyio.BrokenResourceError from exc
            raise

    def try_send_now(self, item: bytes) -> bool:
        """Hand ``item`` to the transport now if ``drain`` would then not wait (the transport
        writes what the pipe takes and keeps the rest below its high-water mark: by
        :meth:`send`'s measure, written); otherwise hand over nothing and return False."""
        if self._closed:
            raise anyio.ClosedResourceError
        writer = self._writer
        transport = writer.transport
        if transport.is_closing():
            return False  # send() reports how it ended
        _low, high = transport.get_write_buffer_limits()
        if transport.get_write_buffer_size() + len(item) > high:
            return False
        writer.write(item)
        if transport.is_closing():  # the write found the pipe broken
            raise anyio.BrokenResourceError
        return True

    async def aclose(self) -> None:
        self._closed = True
        await self._outer.aclose()
