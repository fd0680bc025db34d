"""ACP over Streamable HTTP for the host (issue 22): ``serve --listen``'s second transport.

The wire and the routing rules are in :mod:`acp_bridge.host.http_protocol`. Here they meet
sockets. ``serve --listen`` serves HTTP and WebSocket on one port: the WebSocket listener
(:mod:`acp_bridge.host.websocket`) reads each connection's first request, and hands a POST, a
DELETE or an event-stream GET to :meth:`HttpTransport.serve`, which answers it and the
requests that follow on the same TCP connection (keep-alive).

Each Streamable HTTP *connection* (an ``Acp-Connection-Id``, opened by a POSTed
``initialize``) is one :class:`HttpConnection`: a byte stream of newline-delimited JSON-RPC
messages, as the Unix socket and the WebSocket are, handed to the same handler (the host's
connection code). POSTed messages are the lines it reads; each line it writes goes to the SSE
stream its route names, where the GET reading that stream takes it.

Bounds: a POST body of at most ``max_body_bytes`` (413); at most ``max_connections`` HTTP
connections (503); ``max_outbox_bytes`` of messages waiting for their SSE readers (past it the
host's writes wait, and the host cuts a client off that stays behind); an SSE write that does
not finish within ``stall_s`` ends that stream; a connection that no SSE stream reads and no
request names for ``detached_s`` is ended; an idle keep-alive TCP connection is closed after
``idle_s``, and a request's body must keep coming (``stall_s``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
import h11
from anyio.abc import ByteStream, SocketAttribute, TaskGroup

from acp_bridge.clock import loop_clock
from acp_bridge.core.condition import Condition
from acp_bridge.host.http_protocol import (
    CONNECTION_ID_HEADER,
    SSE_KEEP_ALIVE,
    HttpAsk,
    HttpLimitError,
    HttpRouting,
    Route,
    id_key,
    is_initialize,
    judge_http,
    read_message,
    sse_event,
    wants_http,
)
from acp_bridge.host.ws_protocol import ACP_PATH, DEFAULT_MAX_MESSAGE_BYTES, Refusal

__all__ = ["HttpConnection", "HttpLimits", "HttpTransport"]

log = logging.getLogger(__name__)

_RECEIVE_BYTES: Final = 256 * 1024
_SSE_BATCH_BYTES: Final = 256 * 1024
_DRAIN_BYTES: Final = 64 * 1024
"""What is read of a refused POST's body before answering (so the close does not reset the
connection under the answer)."""

Handler = Callable[["HttpConnection"], Awaitable[Any]]


@dataclass(frozen=True)
class HttpLimits:
    """The bounds of :class:`HttpTransport` (see the module's text)."""

    max_body_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_outbox_bytes: int = 64 * 1024 * 1024
    max_connections: int = 256
    stall_s: float = 60.0
    detached_s: float = 60.0
    keep_alive_s: float = 15.0
    """An SSE stream with nothing to say sends a comment this often (proxies, dead peers)."""
    idle_s: float = 60.0
    initialize_timeout_s: float = 60.0


class HttpConnection(ByteStream):
    """One Streamable HTTP connection as a byte stream of lines (the host's side of it).

    :meth:`receive` gives the POSTed messages, each followed by ``b"\\n"``, and raises
    :class:`anyio.EndOfStream` once the client ended the connection (DELETE, or gone for
    ``detached_s``); :meth:`send` routes each line to its SSE stream, waiting while
    ``max_outbox_bytes`` wait for readers. :meth:`aclose` ends it for the client too: the SSE
    streams deliver what they hold, then end.
    """

    def __init__(self, connection_id: str, limits: HttpLimits) -> None:
        self.id = connection_id
        self.limits = limits
        self.routing = HttpRouting(max_buffered_bytes=limits.max_outbox_bytes)
        self.changed = Condition()
        self.ended: str | None = None
        """Why the client side is over (then SSE streams stop, and receive ends)."""
        self.closed = False
        """The host closed the stream (:meth:`aclose`)."""
        self.writes_done = False
        """The host writes nothing more (:meth:`send_eof`, :meth:`aclose`): the SSE streams
        deliver what they hold, then end."""
        self._inbound: deque[bytes] = deque()
        self._inbound_bytes = 0
        self._partial = bytearray()
        self._initialize: tuple[Any, list[bytes]] | None = None
        self._clock = loop_clock()
        self.last_seen = self._clock()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.ended or "open"
        return f"<HttpConnection {self.id} {state}, {self.routing!r}>"

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return {}

    # -- the host's side ----------------------------------------------------------------------

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._inbound:
            if self.closed:
                raise anyio.ClosedResourceError
            if self.ended is not None:
                raise anyio.EndOfStream
            await self.changed.wait()
        first = self._inbound.popleft()
        if len(first) > max_bytes:
            self._inbound.appendleft(first[max_bytes:])
            first = first[:max_bytes]
        self._inbound_bytes -= len(first)
        self.changed.notify_all()
        return first

    async def send(self, item: bytes) -> None:
        if self.closed:
            raise anyio.ClosedResourceError
        if self.writes_done:
            raise anyio.BrokenResourceError
        self._partial += item
        *lines, rest = bytes(self._partial).split(b"\n")
        self._partial = bytearray(rest)
        for line in lines:
            while not self.routing.has_room and self.ended is None and not self.closed:
                await self.changed.wait()
            if self.closed:
                raise anyio.ClosedResourceError
            if self.ended is not None:
                raise anyio.BrokenResourceError
            if not self._answers_initialize(line):
                try:
                    self.routing.outbound(line)
                except HttpLimitError as exc:
                    self.end(str(exc))
                    raise anyio.BrokenResourceError from exc
            self.changed.notify_all()

    def _answers_initialize(self, line: bytes) -> bool:
        if self._initialize is None:
            return False
        key, slot = self._initialize
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or "method" in message:
            return False
        if id_key(message.get("id")) != key:
            return False
        slot.append(line)
        self._initialize = None
        return True

    async def send_eof(self) -> None:
        self.writes_done = True
        self.changed.notify_all()

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = self.writes_done = True
            self.changed.notify_all()

    # -- the client's side --------------------------------------------------------------------

    def end(self, reason: str) -> None:
        """The client's side is over (DELETE, a bound, gone): drop what waits, wake all."""
        if self.ended is None:
            self.ended = reason
            self.routing.discard()
            self._inbound.clear()
            self._inbound_bytes = 0
            self.changed.notify_all()

    async def put(self, line: bytes) -> bool:
        """Hand one POSTed message to the host, once the ones before it leave room (bounded by
        ``stall_s``). False when the connection ended or the host took nothing in time."""
        self.last_seen = self._clock()
        with anyio.move_on_after(self.limits.stall_s):
            while self._inbound_bytes >= self.limits.max_body_bytes and self.is_live:
                await self.changed.wait()
        if not self.is_live or self._inbound_bytes >= self.limits.max_body_bytes:
            return False
        self._inbound.append(line + b"\n")
        self._inbound_bytes += len(line) + 1
        self.changed.notify_all()
        return True

    async def initialize(self, line: bytes, request_id: Any) -> bytes | None:
        """Hand the opening ``initialize`` to the host and wait (bounded) for its answer."""
        slot: list[bytes] = []
        self._initialize = (id_key(request_id), slot)
        if not await self.put(line):
            return None
        with anyio.move_on_after(self.limits.initialize_timeout_s):
            while not slot and self.is_live:
                await self.changed.wait()
        return slot[0] if slot else None

    @property
    def is_live(self) -> bool:
        """True while the connection takes messages both ways."""
        return self.ended is None and not self.writes_done

    async def watch_detached(self) -> None:
        """End the connection once no SSE stream read it and no request named it for
        ``detached_s`` (a client gone without its DELETE)."""
        while self.is_live:
            if self.routing.has_reader:
                await self.changed.wait()
                continue
            quiet = self._clock() - self.last_seen
            if quiet >= self.limits.detached_s:
                log.info("ending HTTP connection %s: nothing read it for %.0f s", self.id, quiet)
                self.end("detached")
                return
            with anyio.move_on_after(self.limits.detached_s - quiet):
                await self.changed.wait()

    def touch(self) -> None:
        self.last_seen = self._clock()


class HttpTransport:
    """Streamable HTTP at ``path``: the registry of connections, and the request loop of each
    TCP connection handed over by the WebSocket listener."""

    def __init__(
        self, *, token: str, path: str = ACP_PATH, limits: HttpLimits = HttpLimits()
    ) -> None:
        self._token = token
        self._path = path
        self.limits = limits
        self.connections: dict[str, HttpConnection] = {}

    def __repr__(self) -> str:
        return f"<HttpTransport {self._path}, {len(self.connections)} connections>"

    async def serve(
        self,
        stream: ByteStream,
        http: h11.Connection,
        request: h11.Request,
        handler: Handler,
        task_group: TaskGroup,
    ) -> None:
        """Answer ``request`` (read by ``http`` from ``stream``) and the ones that follow on
        the TCP connection; new HTTP connections are handed to ``handler`` in ``task_group``.
        Closes ``stream`` when done."""
        peer = _peer(stream)
        try:
            current: h11.Request | None = request
            while current is not None:
                keep = await self._answer(stream, http, current, handler, task_group, peer)
                if not keep or http.our_state is not h11.DONE or http.their_state is not h11.DONE:
                    break
                http.start_next_cycle()
                current = None
                with anyio.move_on_after(self.limits.idle_s):
                    current = await _read_head(stream, http)
                if current is not None and not wants_http(current):
                    late = Refusal(400, "a WebSocket upgrade must open its TCP connection")
                    await _refuse(stream, http, late)
                    break
        except (anyio.BrokenResourceError, anyio.EndOfStream, OSError, h11.ProtocolError) as exc:
            log.debug("HTTP connection from %s ended: %r", peer, exc)
        except Exception:  # one connection's failure never ends the others
            log.exception("serving HTTP to %s failed", peer)
        finally:
            await _close_quietly(stream)

    async def _answer(
        self,
        stream: ByteStream,
        http: h11.Connection,
        request: h11.Request,
        handler: Handler,
        task_group: TaskGroup,
        peer: str,
    ) -> bool:
        """One request, answered; False when the TCP connection is to be closed after it."""
        ask = judge_http(request, path=self._path, token=self._token)
        if isinstance(ask, Refusal):
            log.info("HTTP %s refused to %s: %d %s", request.method.decode(), peer, ask.status,
                     ask.reason)
            if request.method == b"POST":
                with anyio.move_on_after(1):
                    await _read_body(stream, http, _DRAIN_BYTES)
            await _refuse(stream, http, ask)
            return False
        if ask.method == b"POST":
            return await self._post(stream, http, ask, handler, task_group)
        if ask.method == b"GET":
            await self._get(stream, http, ask)
            return False
        with anyio.move_on_after(self.limits.stall_s):  # a DELETE's (empty) body, for keep-alive
            await _read_body(stream, http, _DRAIN_BYTES)
        return await self._delete(stream, http, ask)

    def _lookup(self, ask: HttpAsk) -> HttpConnection | Refusal:
        if ask.connection_id is None:
            return Refusal(400, "Missing Acp-Connection-Id")
        connection = self.connections.get(ask.connection_id)
        if connection is None or not connection.is_live:
            return Refusal(404, "Unknown Acp-Connection-Id")
        return connection

    # -- POST -------------------------------------------------------------------------------

    async def _post(
        self,
        stream: ByteStream,
        http: h11.Connection,
        ask: HttpAsk,
        handler: Handler,
        task_group: TaskGroup,
    ) -> bool:
        with anyio.move_on_after(self.limits.stall_s) as reading:
            body = await _read_body(stream, http, self.limits.max_body_bytes)
        if reading.cancelled_caught:
            return False  # a body that stopped coming: nothing to answer
        if body is None:
            limit = self.limits.max_body_bytes
            await _refuse(stream, http, Refusal(413, f"a message is at most {limit} bytes"))
            return False
        message = read_message(body)
        if isinstance(message, Refusal):
            await _refuse(stream, http, message)
            return False
        line = _one_line(body, message)
        if is_initialize(message):
            if ask.connection_id is not None:
                refusal = Refusal(400, "Initialize not allowed on existing connection")
                await _refuse(stream, http, refusal)
                return False
            return await self._open(stream, http, line, message["id"], handler, task_group)
        connection = self._lookup(ask)
        if isinstance(connection, Refusal):
            await _refuse(stream, http, connection)
            return False
        refused = connection.routing.inbound(message, ask.session_id)
        if refused is not None:
            await _refuse(stream, http, refused)
            return False
        if not await connection.put(line):
            await _refuse(stream, http, Refusal(503, "the connection takes no more messages"))
            return False
        await _send(stream, http, h11.Response(status_code=202, headers=self._keep_alive()))
        await _send(stream, http, h11.EndOfMessage())
        return True

    async def _open(
        self,
        stream: ByteStream,
        http: h11.Connection,
        line: bytes,
        request_id: Any,
        handler: Handler,
        task_group: TaskGroup,
    ) -> bool:
        if len(self.connections) >= self.limits.max_connections:
            await _refuse(stream, http, Refusal(503, "too many ACP connections; retry later"))
            return False
        connection = HttpConnection(secrets.token_urlsafe(24), self.limits)
        self.connections[connection.id] = connection
        task_group.start_soon(self._run, connection, handler)
        answer = await connection.initialize(line, request_id)
        if answer is None:
            connection.end("initialize unanswered")
            await _refuse(stream, http, Refusal(503, "the host did not answer initialize"))
            return False
        log.info("HTTP connection %s opened", connection.id)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(answer)).encode()),
            (CONNECTION_ID_HEADER, connection.id.encode()),
            *self._keep_alive(),
        ]
        await _send(stream, http, h11.Response(status_code=200, headers=headers))
        await _send(stream, http, h11.Data(answer))
        await _send(stream, http, h11.EndOfMessage())
        return True

    async def _run(self, connection: HttpConnection, handler: Handler) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(connection.watch_detached)
                try:
                    await handler(connection)
                except Exception:  # one connection's failure never ends the others
                    log.exception("the handler of HTTP connection %s failed", connection.id)
                tg.cancel_scope.cancel()
        finally:
            await connection.aclose()
            if self.connections.get(connection.id) is connection:
                del self.connections[connection.id]

    def _keep_alive(self) -> list[tuple[bytes, bytes]]:
        # Told to the client so that it drops an idle connection before we close it (a POST
        # sent into a connection we are closing would be lost).
        return [(b"keep-alive", f"timeout={max(1, int(self.limits.idle_s) - 5)}".encode())]

    # -- GET: an SSE stream -------------------------------------------------------------------

    async def _get(self, stream: ByteStream, http: h11.Connection, ask: HttpAsk) -> None:
        connection = self._lookup(ask)
        if isinstance(connection, Refusal):
            await _refuse(stream, http, connection)
            return
        route = ask.session_id
        if not connection.routing.acquire(route):
            await _refuse(stream, http, Refusal(409, "this stream already has a reader"))
            return
        connection.touch()
        connection.changed.notify_all()
        try:
            headers = [
                (b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-cache"),
                (b"connection", b"close"),
            ]
            await _send(stream, http, h11.Response(status_code=200, headers=headers))
            finished = False  # stays so when the client hung up
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_hangup, stream, tg.cancel_scope)
                finished = await self._pump(stream, http, connection, route)
                tg.cancel_scope.cancel()
            if finished:
                with anyio.move_on_after(self.limits.stall_s):
                    await _send(stream, http, h11.EndOfMessage())
        finally:
            connection.routing.release(route)
            connection.touch()
            connection.changed.notify_all()

    async def _pump(
        self, stream: ByteStream, http: h11.Connection, connection: HttpConnection, route: Route
    ) -> bool:
        """Write the stream's events until the connection is over (True) or a write stalls
        (False)."""
        routing = connection.routing
        while connection.ended is None:
            batch = bytearray()
            while len(batch) < _SSE_BATCH_BYTES:
                line = routing.take(route)
                if line is None:
                    break
                batch += sse_event(line)
            if not batch:
                if connection.writes_done:
                    return True
                with anyio.move_on_after(self.limits.keep_alive_s) as quiet:
                    await connection.changed.wait()
                if not quiet.cancelled_caught:
                    continue
                batch += SSE_KEEP_ALIVE
            connection.changed.notify_all()  # room for the host's writes
            with anyio.move_on_after(self.limits.stall_s) as writing:
                await _send(stream, http, h11.Data(bytes(batch)))
            if writing.cancelled_caught:
                log.info("SSE stream of %s ended: the client read nothing for %.0f s",
                         connection.id, self.limits.stall_s)
                return False
        return True

    # -- DELETE -------------------------------------------------------------------------------

    async def _delete(self, stream: ByteStream, http: h11.Connection, ask: HttpAsk) -> bool:
        connection = self._lookup(ask)
        if isinstance(connection, Refusal):
            await _refuse(stream, http, connection)
            return False
        log.info("HTTP connection %s ended by its client", connection.id)
        connection.end("deleted")
        del self.connections[connection.id]
        await _send(stream, http, h11.Response(status_code=202, headers=self._keep_alive()))
        await _send(stream, http, h11.EndOfMessage())
        return True


# --- helpers -------------------------------------------------------------------------------------


def _one_line(body: bytes, message: dict[str, Any]) -> bytes:
    """The POSTed message as one line: the body itself unless it spans lines."""
    stripped = body.strip()
    if b"\n" not in stripped and b"\r" not in stripped:
        return stripped
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


async def _send(stream: ByteStream, http: h11.Connection, event: h11.Event) -> None:
    data = http.send(event)
    if data:
        await stream.send(data)


async def _refuse(stream: ByteStream, http: h11.Connection, refusal: Refusal) -> None:
    if http.our_state is not h11.SEND_RESPONSE:
        return  # the response had begun: closing is all that is left
    await stream.send(b"".join(http.send(event) or b"" for event in refusal.to_h11()))


async def _read_head(stream: ByteStream, http: h11.Connection) -> h11.Request | None:
    """The next request's head, or None when the client closed the connection."""
    while True:
        event = http.next_event()
        if isinstance(event, h11.Request):
            return event
        if event is not h11.NEED_DATA:
            return None
        try:
            http.receive_data(await stream.receive(_RECEIVE_BYTES))
        except anyio.EndOfStream:
            http.receive_data(b"")


async def _read_body(stream: ByteStream, http: h11.Connection, limit: int) -> bytes | None:
    """The request's body, or None past ``limit`` bytes."""
    body = bytearray()
    while True:
        event = http.next_event()
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > limit:
                return None
        elif isinstance(event, h11.EndOfMessage):
            return bytes(body)
        elif event is h11.NEED_DATA:
            try:
                http.receive_data(await stream.receive(_RECEIVE_BYTES))
            except anyio.EndOfStream:
                http.receive_data(b"")
        else:
            raise anyio.EndOfStream  # the client closed the connection inside the body


async def _cancel_on_hangup(stream: ByteStream, scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` when the client closes the TCP connection of an SSE stream (the
    bytes it may send meanwhile are no request we serve: the stream's answer says close)."""
    with contextlib.suppress(anyio.BrokenResourceError, anyio.EndOfStream, OSError):
        while await stream.receive(_RECEIVE_BYTES):
            pass
    scope.cancel()


async def _close_quietly(stream: ByteStream) -> None:
    with anyio.CancelScope(shield=True), contextlib.suppress(anyio.BrokenResourceError, OSError):
        await stream.aclose()


def _peer(stream: ByteStream) -> str:
    address = stream.extra(SocketAttribute.remote_address, None)
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address)
