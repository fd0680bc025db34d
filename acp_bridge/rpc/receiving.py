"""The receiving side of a :class:`~acp_bridge.rpc.peer.JsonRpcPeer`: every incoming line.

:class:`Receiver` reads lines until the connection ends, shows each to the peer's observers,
decodes and classifies it, and routes each message:

* a response settles its call in the :class:`~acp_bridge.rpc.pending.PendingTable`; the call's
  callbacks run right here, before the next line is read, so a requester's ``on_answer`` fences
  off whatever the other side sends after its answer;
* a request goes to the :class:`~acp_bridge.rpc.serving.RequestServer`, which at its bound makes
  the reader wait (backpressure); ``$/cancel_request`` goes to the server too;
* any other notification goes to its handler, inline and in arrival order, with no task each;
* a line that is not valid JSON-RPC is logged, and answered (-32700, -32600) unless it was a
  response or a notification, which are never answered.

This is the hot path (every line the other side writes): routing costs plain calls and the
handlers' own awaits, no task, lock or allocation of its own per line. It holds no buffer.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal

import anyio

from acp_bridge.errors import ConnectionClosedError, FramingError, ResourceClosedError, RpcError
from acp_bridge.rpc.framing import LineReader
from acp_bridge.rpc.pending import PendingTable
from acp_bridge.rpc.serving import RequestServer
from acp_bridge.wire import jsonrpc
from acp_bridge.wire.jsonrpc import BadMessage, Notification, Request, Response

__all__ = [
    "CANCEL_REQUEST_METHOD",
    "NotificationHandler",
    "OtherNotificationHandler",
    "Receiver",
]

log = logging.getLogger(__name__)

CANCEL_REQUEST_METHOD: Final = "$/cancel_request"

NotificationHandler = Callable[[Any], Awaitable[None] | None]
OtherNotificationHandler = Callable[[str, Any], Awaitable[None]]
"""``async def handler(method, params)`` for notifications with no handler of their own."""
"""``handler(params)``, sync or async. Exceptions are logged; they never stop the reader."""

InObserver = Callable[[Literal["in"], bytes], None]
"""What the receiver needs of a :data:`~acp_bridge.rpc.peer.Observer`: it only shows ``in``."""


class Receiver:
    """Reads a peer's incoming lines and routes each message (see the module docstring).

    ``observers`` is the peer's own list, read at every line, so observers the peer adds or
    removes later are seen at once.
    """

    def __init__(
        self,
        reader: LineReader,
        pending: PendingTable,
        server: RequestServer,
        observers: Sequence[InObserver],
        *,
        name: str,
    ) -> None:
        self._reader = reader
        self._pending = pending
        self._server = server
        self._observers = observers
        self._name = name
        self._notification_handlers: dict[str, tuple[NotificationHandler, bool]] = {}
        self._other_notifications: OtherNotificationHandler | None = None
        self.invalid_log_level = logging.WARNING
        """How loudly a line that is not valid JSON-RPC is logged."""

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Handle notifications of ``method`` with ``handler``, replacing any earlier one."""
        self._notification_handlers[method] = (handler, inspect.iscoroutinefunction(handler))

    def on_other_notifications(self, handler: OtherNotificationHandler) -> None:
        """Handle notifications of every method with no handler of its own (a relay)."""
        self._other_notifications = handler

    async def read_until_closed(self) -> BaseException:
        """Read and route lines until the connection ends; return why it ended."""
        while True:
            try:
                line = await self._reader.receive_line()
            except anyio.EndOfStream:
                return ConnectionClosedError(f"{self._name} closed the connection")
            except FramingError as exc:
                log.warning("%s: %s; treating the connection as broken", self._name, exc)
                closed = ConnectionClosedError(f"{self._name}: {exc}")
                closed.__cause__ = exc
                return closed
            except (ConnectionClosedError, ResourceClosedError) as exc:
                return exc
            for observer in self._observers:
                observer("in", line)
            await self._handle_line(line)

    async def _handle_line(self, line: bytes) -> None:
        if not line or line.isspace():
            return
        try:
            value = jsonrpc.decode_line(line)
        except FramingError as exc:
            log.log(
                self.invalid_log_level,
                "%s sent an unreadable line (%s): %r",
                self._name,
                exc,
                line[:120],
            )
            await self._server.reply(jsonrpc.error_response(None, RpcError.parse_error(str(exc))))
            return
        if type(value) is list:
            if not value:
                await self._server.reply(
                    jsonrpc.error_response(None, RpcError.invalid_request("empty batch"))
                )
            for item in value:
                await self._handle_message(jsonrpc.classify(item))
        else:
            await self._handle_message(jsonrpc.classify(value))

    async def _handle_message(self, message: jsonrpc.Message) -> None:
        if type(message) is Notification:
            await self._handle_notification(message)
        elif type(message) is Response:
            if self._pending.resolve(message) is None:
                log.warning("%s: dropped a response for unknown id %r", self._name, message.id)
        elif type(message) is Request:
            await self._server.serve(message)
        else:
            assert isinstance(message, BadMessage)
            log.log(
                self.invalid_log_level,
                "%s sent an invalid message: %s",
                self._name,
                message.error.data,
            )
            if message.reply:
                await self._server.reply(jsonrpc.error_response(message.id, message.error))

    async def _handle_notification(self, message: Notification) -> None:
        if message.method == CANCEL_REQUEST_METHOD:
            self._server.cancel(message.params)
            return
        entry = self._notification_handlers.get(message.method)
        if entry is None and self._other_notifications is not None:
            try:
                await self._other_notifications(message.method, message.params)
            except Exception:
                log.exception("%s: relay of notification %s failed", self._name, message.method)
            return
        if entry is None:
            log.debug("%s: ignored notification %s", self._name, message.method)
            return
        handler, is_async = entry
        try:
            if is_async:
                await handler(message.params)  # type: ignore[misc]
            else:
                handler(message.params)
        except Exception:
            log.exception("%s: handler for notification %s failed", self._name, message.method)
