"""A bidirectional JSON-RPC 2.0 peer over newline-delimited JSON.

Both ACP sides are servers: the agent calls the client (permissions, files, terminals) while the
client's ``session/prompt`` is still open. So one :class:`JsonRpcPeer` both sends requests and
serves them on a single pair of byte streams.

Concurrency:

* :meth:`JsonRpcPeer.run` owns a task group holding the reader loop (see :mod:`.receiving`),
  the queue writer (see :class:`~acp_bridge.rpc.framing.LineWriter`; short lines are written
  by their sender when the stream is idle), and the workers that serve incoming requests (see
  :mod:`.serving`: reused workers, each request in its own cancel scope), so a handler may
  itself call the other side.
* At most ``max_requests_in_flight`` incoming requests are served at once. At the bound the
  reader, holding the next request, waits for a handler to finish before it reads on: the
  other side's writes back up into its pipe (backpressure; nothing is dropped or refused).
  Responses and notifications that came before that request have been handled, but a handler
  that waits for an answer from this same peer cannot get it while the reader waits, so the
  bound (128 by default) must exceed the number of such handlers that can be open at once.
* Notifications are handled inline by the reader, in arrival order, with no task each.
  ``session/update`` is the high-rate path, and order matters there; a slow handler slows the
  reader, which is the backpressure we want.
* ``$/cancel_request`` cancels the named in-flight handler, which then answers -32800. A caller
  of :meth:`request` that is cancelled sends ``$/cancel_request`` for its call.

Shutdown: the connection ends on EOF, on a broken stream, on a fatal framing error (a line over
the cap), or on :meth:`aclose`. Whatever the cause, every pending request fails at once
(:class:`ConnectionClosedError` when the peer went away, :class:`ResourceClosedError` after
``aclose``), in-flight handlers are cancelled, and later calls fail immediately. The peer does
not own its streams: whoever opened them closes them (for an agent, the launcher, in the
order its shutdown sequence needs).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final, Literal, NoReturn

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup, TaskStatus

from acp_bridge.errors import BridgeError, ConnectionClosedError, ResourceClosedError
from acp_bridge.rpc.dispatch import OtherRequestHandler, RequestDispatcher, RequestHandler
from acp_bridge.rpc.framing import DEFAULT_MAX_LINE_BYTES, LineReader, LineWriter
from acp_bridge.rpc.pending import PendingCall, PendingTable
from acp_bridge.rpc.receiving import (
    CANCEL_REQUEST_METHOD,
    NotificationHandler,
    OtherNotificationHandler,
    Receiver,
)
from acp_bridge.rpc.serving import RequestServer
from acp_bridge.wire import jsonrpc
from acp_bridge.wire.jsonrpc import RequestId

__all__ = ["CANCEL_REQUEST_METHOD", "Direction", "JsonRpcPeer", "NotificationHandler", "Observer"]

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUESTS_IN_FLIGHT: Final = 128
"""Incoming requests served at once, per peer; past it the reader stops reading."""

CANCEL_NOTICE_TIMEOUT_S: Final = 1.0
"""How long a cancelled caller may spend queueing its ``$/cancel_request``: the note is a
courtesy, and the caller's own cancellation must not wait on a stuck pipe."""

Direction = Literal["in", "out"]
Observer = Callable[[Direction, bytes], None]
"""Sees every raw line (newline excluded for ``in``, included for ``out``). Must not block."""


class JsonRpcPeer:
    """One end of a JSON-RPC connection, sending and serving.

    Example::

        peer = JsonRpcPeer(process.stdout, process.stdin, name="echo-agent")
        peer.on_notification("session/update", handle_update)
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            result = await peer.request("initialize", {"protocolVersion": 1})
            ...
            await peer.aclose()
    """

    def __init__(
        self,
        receive_stream: ByteReceiveStream,
        send_stream: ByteSendStream,
        *,
        name: str = "peer",
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        id_prefix: str | None = None,
        max_requests_in_flight: int = DEFAULT_MAX_REQUESTS_IN_FLIGHT,
    ) -> None:
        if max_requests_in_flight < 1:
            raise ValueError("max_requests_in_flight must be positive")
        self.name = name
        self._reader = LineReader(receive_stream, max_line_bytes=max_line_bytes)
        self._writer = LineWriter(send_stream)
        self._pending = PendingTable(id_prefix=id_prefix)
        self._dispatcher = RequestDispatcher()
        self._observers: list[Observer] = []
        self._server = RequestServer(
            self._dispatcher, self._send, name=name, max_in_flight=max_requests_in_flight
        )
        self._receiver = Receiver(
            self._reader, self._pending, self._server, self._observers, name=name
        )
        self._task_group: TaskGroup | None = None
        self._closed_reason: BaseException | None = None
        self._finished = anyio.Event()

    def __repr__(self) -> str:
        state = (
            "closed"
            if self._closed_reason is not None
            else ("running" if self._task_group is not None else "new")
        )
        return (
            f"<JsonRpcPeer {self.name!r} [{state}, {len(self._pending)} pending, "
            f"{self._server.serving} serving]>"
        )

    # -- registration -------------------------------------------------------------------------

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """Serve ``method``: ``await handler(params)`` returns the result or raises RpcError."""
        self._dispatcher.register(method, handler)

    def on_other_requests(self, handler: OtherRequestHandler) -> None:
        """Serve every request method with no handler of its own: ``await handler(method,
        params)`` (a relay); it raises LookupError for a method it does not serve."""
        self._dispatcher.other = handler

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Handle notifications of ``method`` inline, in arrival order."""
        self._receiver.on_notification(method, handler)

    def on_other_notifications(self, handler: OtherNotificationHandler) -> None:
        """Handle every notification method with no handler of its own: ``await
        handler(method, params)``, inline, in arrival order (a relay; keep it short)."""
        self._receiver.on_other_notifications(handler)

    def add_observer(self, observer: Observer) -> None:
        """Show every raw frame, in both directions, to ``observer`` (tracing, recording)."""
        self._observers.append(observer)

    def remove_observer(self, observer: Observer) -> None:
        """Stop showing frames to ``observer`` (added before); an unknown one is ignored."""
        if observer in self._observers:
            self._observers.remove(observer)

    @property
    def invalid_log_level(self) -> int:
        """How loudly a line that is not valid JSON-RPC is logged (a caller that explains it
        in its own words, e.g. a failed start, turns it down)."""
        return self._receiver.invalid_log_level

    @invalid_log_level.setter
    def invalid_log_level(self, level: int) -> None:
        self._receiver.invalid_log_level = level

    # -- state ----------------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._closed_reason is not None

    @property
    def requests_in_flight(self) -> int:
        """Incoming requests being served or answered now, each by one worker (never more
        than ``max_requests_in_flight``)."""
        return self._server.in_flight

    @property
    def idle_workers(self) -> int:
        """Request workers waiting for the next request (at most ``IDLE_WORKERS_KEPT``)."""
        return self._server.idle_workers

    @property
    def closed_reason(self) -> BaseException | None:
        """Why the connection ended (None while it is open)."""
        return self._closed_reason

    async def wait_closed(self) -> None:
        """Return once :meth:`run` has finished."""
        await self._finished.wait()

    # -- running --------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the connection until it ends. Reports ready through ``task_status``.

        Returns normally however the connection ended; :attr:`closed_reason` tells why.
        """
        if self._task_group is not None or self._finished.is_set():
            raise RuntimeError(f"{self.name}: run() may only be called once")
        if self._closed_reason is not None:  # closed before it ever ran
            self._finished.set()
            task_status.started()
            return
        try:
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                self._server.attach(task_group)
                task_group.start_soon(self._run_writer)
                task_status.started()
                reason = await self._receiver.read_until_closed()
                self._close(reason)
        finally:
            if self._closed_reason is None:  # cancelled from outside
                self._close(ResourceClosedError(f"{self.name}: the peer was stopped"))
            self._writer.dispose()
            self._finished.set()

    async def aclose(self) -> None:
        """Stop serving; pending and later requests fail with ResourceClosedError."""
        self._close(ResourceClosedError(f"{self.name}: the connection was closed by us"))
        await anyio.lowlevel.checkpoint()

    def _close(self, reason: BaseException) -> None:
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        failed = self._pending.fail_all(reason)
        if failed:
            log.debug("%s: %d pending request(s) failed: %s", self.name, failed, reason)
        self._writer.close()
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()

    async def _run_writer(self) -> None:
        try:
            await self._writer.run()
        except ConnectionClosedError as exc:
            log.info("%s: %s", self.name, exc)
            self._close(exc)

    # -- sending --------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on_answer: Callable[[], None] | None = None,
    ) -> Any:
        """Call ``method`` on the other side and return its result.

        The caller owns the deadline: wrap the call in ``anyio.fail_after``. If the caller is
        cancelled after the request went out, ``$/cancel_request`` is sent for it.
        ``on_answer`` is called synchronously when the answer (or the connection's end) is
        read, before any later message is handled.

        Raises:
            RpcError: the other side answered with an error.
            ConnectionClosedError: the connection ended before the answer came.
            ResourceClosedError: :meth:`aclose` was called.
            LocalProtocolError: ``params`` cannot be serialized.
        """
        answered = anyio.Event()

        def wake() -> None:
            # Runs in the reader, before it reads the next line: ``on_answer`` can fence off
            # whatever the peer sends after its answer.
            answered.set()
            if on_answer is not None:
                on_answer()

        try:
            call = self._pending.add(method, wake)
        except BridgeError as exc:
            raise _fresh(exc) from exc
        sent = False
        try:
            await self._send(jsonrpc.request(call.id, method, params))
            sent = True
            await answered.wait()
        except anyio.get_cancelled_exc_class():
            if sent and not call.is_settled:
                await self._send_cancel_notice(call)
            raise
        finally:
            self._pending.discard(call.id)
        return _outcome(call)

    async def start_request(
        self,
        method: str,
        params: Any,
        on_settled: Callable[[Callable[[], Any]], None],
    ) -> RequestId:
        """Send a request and return once it is written, without waiting for the answer.

        ``on_settled(outcome)`` runs synchronously in the reader when the answer is read (or
        when the connection ends), before any later message is handled; ``outcome()`` returns
        the result or raises as :meth:`request` would. It must not block and should not raise.
        No task waits for the answer: a turn's prompt costs no scheduler pass of its own. A
        caller that stops caring calls :meth:`forget`; a late answer is then dropped.

        Raises:
            ConnectionClosedError, ResourceClosedError, LocalProtocolError: as for request().
        """
        settled: list[PendingCall] = []

        def wake() -> None:
            on_settled(partial(_outcome, settled[0]))

        try:
            call = self._pending.add(method, wake)
        except BridgeError as exc:
            raise _fresh(exc) from exc
        settled.append(call)
        try:
            await self._send(jsonrpc.request(call.id, method, params))
        except BaseException:
            self._pending.discard(call.id)
            raise
        return call.id

    def forget(self, call_id: RequestId) -> None:
        """Stop caring about a request sent with :meth:`start_request`."""
        self._pending.discard(call_id)

    async def _send_cancel_notice(self, call: PendingCall) -> None:
        with anyio.move_on_after(CANCEL_NOTICE_TIMEOUT_S, shield=True):
            try:
                await self.notify(CANCEL_REQUEST_METHOD, {"requestId": call.id})
            except BridgeError as exc:
                log.debug("%s: could not send %s: %s", self.name, CANCEL_REQUEST_METHOD, exc)

    async def notify(self, method: str, params: Any = None, *, wait_written: bool = False) -> None:
        """Send a notification. With ``wait_written``, return only once it reached the stream.

        Raises:
            ConnectionClosedError, ResourceClosedError, LocalProtocolError: as for request().
        """
        await self._send(jsonrpc.notification(method, params), wait_written=wait_written)

    async def notify_within(self, method: str, params: Any, timeout_s: float) -> bool:
        """Send a notification and wait until it reached the stream, for at most ``timeout_s``
        seconds. False when it had not by then (it stays queued and may still go out). The
        timer is armed only when the stream cannot take the line at once, which a pipe with
        room always does.

        Raises:
            ConnectionClosedError, ResourceClosedError, LocalProtocolError: as for request().
        """
        line = self._encode(jsonrpc.notification(method, params))
        try:
            if self._writer.send_line_now(line):
                return True
            with anyio.move_on_after(timeout_s):
                await self._writer.send_line(line, wait_written=True)
                return True
            return False
        except (ConnectionClosedError, ResourceClosedError) as exc:
            self._raise_closed(exc)

    async def send_lines(self, data: bytes, *, wait_written: bool = False) -> None:
        """Write complete lines encoded already (each one JSON-RPC message ending in a
        newline), in order with everything else this peer sends: a fan-out encodes a message
        once for many peers. Not shown to the observers.

        Raises:
            ConnectionClosedError, ResourceClosedError: as for request().
        """
        if self._closed_reason is not None:
            raise _fresh(self._closed_reason) from self._closed_reason
        try:
            await self._writer.send_line(data, wait_written=wait_written)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            self._raise_closed(exc)

    def can_send_lines_now(self) -> bool:
        """Whether :meth:`send_lines_now` may be called (see :meth:`LineWriter.can_send_now`)."""
        return self._closed_reason is None and self._writer.can_send_now()

    def send_lines_now(self, data: bytes) -> anyio.Event | None:
        """Write complete lines encoded already at once, as :meth:`send_lines` does, without a
        wait: the rest of what the socket did not take goes first in the writer's queue. None
        when all was written, else an event set once the rest was (see
        :meth:`LineWriter.send_now`); only when :meth:`can_send_lines_now` is True.

        Raises:
            ConnectionClosedError: the stream broke.
        """
        try:
            return self._writer.send_now(data)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            self._raise_closed(exc)

    async def _send(self, message: dict[str, Any], *, wait_written: bool = False) -> None:
        line = self._encode(message)
        try:
            await self._writer.send_line(line, wait_written=wait_written)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            self._raise_closed(exc)

    def _encode(self, message: dict[str, Any]) -> bytes:
        """The message's line, shown to the observers; refused once the connection ended."""
        if self._closed_reason is not None:
            raise _fresh(self._closed_reason) from self._closed_reason
        line = jsonrpc.encode_message(message)
        for observer in self._observers:
            observer("out", line)
        return line

    def _raise_closed(self, exc: ConnectionClosedError | ResourceClosedError) -> NoReturn:
        """Raise for a write that found the connection ended: why it ended, not the writer's
        view of it, so every caller sees the same error type."""
        if self._closed_reason is None and isinstance(exc, ConnectionClosedError):
            self._close(exc)  # our own write found the stream broken
        if self._closed_reason is not None:
            raise _fresh(self._closed_reason) from self._closed_reason
        raise exc


def _fresh(exc: BaseException) -> BaseException:
    """A copy of a shared failure, so concurrent raisers don't share one traceback."""
    clone = copy.copy(exc)
    clone.__traceback__ = None
    return clone


def _outcome(call: PendingCall) -> Any:
    if call.failure is not None:
        raise _fresh(call.failure) from call.failure
    response = call.response
    assert response is not None
    if response.error is not None:
        raise response.error
    return response.result
