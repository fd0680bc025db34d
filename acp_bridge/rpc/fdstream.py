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
"""

from __future__ import annotations

import os

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, ByteSendStream

__all__ = ["FdReceiveStream", "FdSendStream"]

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


class FdReceiveStream(_FdStream, ByteReceiveStream):
    """Reads from a pipe's file descriptor."""

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
            await anyio.lowlevel.checkpoint()
        else:
            await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            self._check_open()
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                self._reads_since_yield = 0
                await anyio.wait_readable(self._fd)
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
            self._check_open()
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                if len(view) == len(item):
                    await anyio.wait_writable(self._fd)
                else:
                    with anyio.CancelScope(shield=True):
                        await anyio.wait_writable(self._fd)
                continue
            except OSError as exc:  # EPIPE above all: the reader is gone
                raise anyio.BrokenResourceError from exc
            view = view[written:]

    async def send_eof(self) -> None:
        await self.aclose()
