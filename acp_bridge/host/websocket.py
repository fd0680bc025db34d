"""ACP over WebSocket for the host (issue 22): ``serve --listen`` and ``attach --host URL``.

The host's connection code reads and writes newline-delimited JSON on an
:class:`anyio.abc.ByteStream`, the Unix socket's kind of stream. :class:`WebSocketStream` is
such a stream over a WebSocket connection (one JSON-RPC message per text message, see
:mod:`acp_bridge.host.ws_protocol`), so the same code serves both.

* :func:`serve_websocket` listens on ``HOST:PORT`` and hands each accepted connection to a
  handler, after the opening handshake: path ``/acp``, a WebSocket upgrade, and the bearer token
  (anything else gets its HTTP status and a one-line reason, and the handler never sees it).
  With an :class:`ssl.SSLContext` (:func:`server_ssl_context`) each connection is TLS first.
  At most ``max_connections`` connections are served at once; past it, the next waits in the
  listen backlog until one ends. The TLS and HTTP handshakes are bounded in time.
* :func:`plan_listen` checks ``serve --listen``'s flags (address, bind rule, TLS pair, token
  file) before anything listens; :meth:`ListenPlan.serve` then runs :func:`serve_websocket`.
* :func:`connect_websocket` is the client: ``ws://`` or ``wss://``, with the token
  (:func:`client_ssl_context` trusts a CA file for a host with a certificate of its own).

Each connection is TLS (when asked), then one HTTP request, then WebSocket frames. wsproto does
the frames and the 101 answer; it is sans-IO (in h11's family), so all of this runs on anyio's
asyncio and trio backends alike.

Why not anyio's :class:`~anyio.streams.tls.TLSListener`: its ``serve`` starts a task per
connection with no bound and logs every failed handshake with a traceback (a port scan would
fill the log). The loop here takes a slot before it accepts, then wraps the stream with
:meth:`TLSStream.wrap <anyio.streams.tls.TLSStream.wrap>` as TLSListener does, in the
connection's own task under the handshake's time limit.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import h11
from anyio.abc import (
    ByteStream,
    Listener,
    SocketAttribute,
    SocketListener,
    SocketStream,
    TaskGroup,
    TaskStatus,
)
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSStream
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import AcceptConnection, RejectConnection, RejectData, Request
from wsproto.utilities import ProtocolError as WsProtocolError

from acp_bridge.clock import loop_clock
from acp_bridge.errors import BridgeError, UnsafeFileError
from acp_bridge.host.http_protocol import wants_http
from acp_bridge.host.http_transport import HttpLimits, HttpTransport
from acp_bridge.host.tokens import load_or_create_token
from acp_bridge.host.ws_protocol import (
    ACP_PATH,
    DEFAULT_MAX_MESSAGE_BYTES,
    Ending,
    LineFraming,
    ListenRefusedError,
    Received,
    Refusal,
    check_bind,
    judge_upgrade,
    parse_listen,
    websocket_url,
)

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "ListenPlan",
    "WebSocketLimits",
    "WebSocketListener",
    "WebSocketRejectedError",
    "WebSocketStream",
    "client_ssl_context",
    "connect_websocket",
    "plan_listen",
    "serve_websocket",
    "server_ssl_context",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS: Final = 256
"""Connections served at once: the host's default bound on clients."""
HANDSHAKE_TIMEOUT_S: Final = 10.0
"""How long a new connection may take to finish its TLS handshake and its upgrade request."""
CLOSE_TIMEOUT_S: Final = 5.0
"""How long we wait for the peer's close frame after sending ours, before closing anyway."""
PING_INTERVAL_S: Final = 30.0
"""A connection that sent nothing for this long is pinged, and closed (1011) if nothing, not
even the pong, comes within as long again: a client whose network went away does not hold its
slot and its place in a conversation until TCP gives up (hours). None: no pings."""
_RECEIVE_BYTES: Final = 256 * 1024
_MAX_REQUEST_BYTES: Final = 16 * 1024
"""The upgrade request's head: a request line and headers, no body."""
_MAX_REJECTION_BODY_BYTES: Final = 4096


class WebSocketRejectedError(BridgeError):
    """The server refused the WebSocket during the opening handshake: ``status`` (401, 404,
    ...) and its one-line ``reason``."""

    def __init__(self, url: str, status: int, reason: str) -> None:
        super().__init__(f"{url}: the server refused the WebSocket: {status} {reason}".rstrip())
        self.url = url
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class WebSocketLimits:
    """The bounds of :func:`serve_websocket`; see the constants for what each bounds."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S
    close_timeout_s: float = CLOSE_TIMEOUT_S
    ping_interval_s: float | None = PING_INTERVAL_S


class WebSocketStream(ByteStream):
    """A byte stream of newline-delimited lines over an open WebSocket connection.

    :meth:`receive` returns the received text messages, each followed by ``b"\\n"``;
    :meth:`send` sends each ``\\n``-ended line as a text message. One task may receive while
    others send. :meth:`send_eof` begins the close handshake (receiving goes on until the
    peer's close); :meth:`aclose` ends it and closes the transport. ``close_code`` and
    ``close_reason`` tell how it ended once it did.

    Errors, as anyio's streams raise them: :class:`anyio.EndOfStream` after a close between
    messages, :class:`anyio.BrokenResourceError` for a protocol error (the peer was sent the
    close code: 1009 for a message over the bound, 1007 for a newline in one, 1003 for a binary
    one), a close in the middle of a message, or a lost transport;
    :class:`anyio.ClosedResourceError` after our own :meth:`aclose`.

    A :meth:`send` cancelled while its frames were being written may leave part of a frame
    on the wire, as a cancelled write to a TCP stream may: the connection is then of no
    more use. The JSON-RPC peer's writer cancels its task only when the connection ends.
    """

    def __init__(
        self,
        transport: ByteStream,
        connection: Connection,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
    ) -> None:
        self._transport = transport
        self._framing = LineFraming(connection, max_message_bytes=max_message_bytes)
        self._close_timeout_s = close_timeout_s
        self._ready: deque[bytes] = deque()
        self._send_lock = anyio.Lock(fast_acquire=True)  # no scheduler pass when free
        self._clock = loop_clock()
        self._last_received = self._clock()  # when bytes last came from the peer
        self._receiving = False
        self._primed = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<WebSocketStream {self._framing!r}, {len(self._ready)} pieces ready>"

    @property
    def close_code(self) -> int | None:
        return self._framing.close_code

    @property
    def close_reason(self) -> str:
        return self._framing.close_reason

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._transport.extra_attributes  # the peer's address, TLS details

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        self._receiving = True
        try:
            if not self._primed:  # frames that came with the handshake's last bytes
                self._primed = True
                await self._handle(self._framing.receive_data(b""))
            while not self._ready:
                ending = self._framing.ending
                if ending is not None:
                    if ending is Ending.CLOSED:
                        raise anyio.EndOfStream
                    raise anyio.BrokenResourceError
                await self._receive_more()
        finally:
            self._receiving = False
        return self._take(max_bytes)

    def _take(self, max_bytes: int) -> bytes:
        ready = self._ready
        first = ready.popleft()
        if len(first) > max_bytes:
            ready.appendleft(first[max_bytes:])
            return first[:max_bytes]
        if not ready or len(first) + len(ready[0]) > max_bytes:
            return first
        pieces, size = [first], len(first)  # many short lines: handed over together
        while ready and size + len(ready[0]) <= max_bytes:
            piece = ready.popleft()
            pieces.append(piece)
            size += len(piece)
        return b"".join(pieces)

    async def _receive_more(self) -> None:
        try:
            data: bytes | None = await self._transport.receive(_RECEIVE_BYTES)
            self._last_received = self._clock()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            data = None
        except anyio.ClosedResourceError:
            if self._closed:
                raise  # our own aclose() from another task
            data = None
        await self._handle(self._framing.receive_data(data))

    async def _handle(self, received: Received) -> None:
        self._ready.extend(received.data)
        if received.reply:
            await self._send_raw(bytes(received.reply))
        if received.ending is not None:
            await self._finish()

    async def _finish(self) -> None:
        """After the end: wait (bounded) for the peer's close frame if ours is unanswered,
        then close the transport."""
        try:
            with anyio.move_on_after(self._close_timeout_s):
                while self._framing.awaits_close_reply:
                    try:
                        data = await self._transport.receive(_RECEIVE_BYTES)
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
                    self._framing.receive_data(data)
        finally:
            await _close_quietly(self._transport)

    async def _send_raw(self, data: bytes) -> None:
        async with self._send_lock:
            await self._transport.send(data)

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        async with self._send_lock:
            if not self._framing.is_open:
                raise anyio.BrokenResourceError  # the close handshake began: no more messages
            frames = self._framing.frames_for(item)
            if frames:
                await self._transport.send(frames)

    async def send_eof(self) -> None:
        """Begin the close handshake (close 1000): nothing more is sent; :meth:`receive` goes
        on until the peer's close frame (then :class:`anyio.EndOfStream`)."""
        async with self._send_lock:
            frame = self._framing.close_frame()
            if frame:
                await self._transport.send(frame)

    async def aclose(self) -> None:
        """End the connection: our close frame if not sent yet, the peer's awaited (unless
        another task is receiving), then the transport closed. Shielded, and bounded by the
        close timeout as a whole (a sender stuck on a peer that stops reading holds the lock
        our close frame needs)."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._framing.ending is None:
                with anyio.move_on_after(self._close_timeout_s):
                    await self._close_handshake()
            await _close_quietly(self._transport)

    async def _close_handshake(self) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self.send_eof()
            if self._receiving:  # that task sees the close as ClosedResourceError
                return
            while self._framing.awaits_close_reply:
                try:
                    data = await self._transport.receive(_RECEIVE_BYTES)
                except anyio.EndOfStream:
                    break
                self._framing.receive_data(data)

    async def keep_alive(self, interval_s: float) -> None:
        """Ping the peer after ``interval_s`` with nothing received, and close the connection
        (1011) when nothing comes within ``interval_s`` more; returns then. Run it beside the
        task that receives (the pong is read by :meth:`receive`)."""
        while True:
            quiet_s = self._clock() - self._last_received
            if quiet_s < interval_s:
                await anyio.sleep(interval_s - quiet_s)
                continue
            pinged = self._clock()
            with anyio.move_on_after(interval_s):  # a sender stuck on a full socket holds it
                await self.ping(b"keep-alive")
                await anyio.sleep(interval_s)
            if self._last_received < pinged:
                log.info("closing a WebSocket: no answer to a ping in %.0f s", interval_s)
                await self.close(1011, "no answer to a ping")
                return

    async def close(self, code: int, reason: str = "") -> None:
        """:meth:`aclose` with this close code and reason (1000 and none by default)."""
        with (
            anyio.move_on_after(self._close_timeout_s),
            contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError),
        ):
            async with self._send_lock:
                frame = self._framing.close_frame(code, reason)
                if frame:
                    await self._transport.send(frame)
        await self.aclose()

    async def ping(self, payload: bytes = b"") -> None:
        """Send a ping (its pong is read, and dropped, by :meth:`receive`)."""
        async with self._send_lock:
            if self._framing.is_open:
                await self._transport.send(self._framing.ping_frame(payload))


async def _close_quietly(stream: ByteStream) -> None:
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(anyio.BrokenResourceError, OSError):
            await stream.aclose()


# --- the server ----------------------------------------------------------------------------------


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server TLS context from ``--tls-cert`` (PEM, the chain) and ``--tls-key`` (PEM).

    Raises:
        OSError, ssl.SSLError: unreadable files, or a key that does not match the certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert, keyfile=key)
    return context


def client_ssl_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """A client TLS context for ``wss://``: the system's trust store, or only the CA
    certificates in ``ca_file`` (PEM) for a host with a certificate of its own making.

    Raises:
        OSError, ssl.SSLError: an unreadable or malformed ``ca_file``.
    """
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


Handler = Callable[[ByteStream], Awaitable[None]]
"""What serves a connection: a :class:`WebSocketStream`, or a Streamable HTTP
:class:`~acp_bridge.host.http_transport.HttpConnection`."""


@dataclass(frozen=True)
class ListenPlan:
    """What ``serve --listen`` will serve, every flag checked before anything listens:
    :func:`plan_listen` makes it, :meth:`serve` runs it."""

    listen: str
    host: str
    port: int
    token: str = field(repr=False)
    token_file: Path
    ssl_context: ssl.SSLContext | None

    def url(self, port: int | None = None) -> str:
        """The URL clients use (``port``: the one bound, when ``--listen`` said 0)."""
        tls = self.ssl_context is not None
        return websocket_url(self.host, self.port if port is None else port, tls=tls)

    async def open_listener(
        self, *, limits: WebSocketLimits = WebSocketLimits()
    ) -> WebSocketListener:
        """:meth:`WebSocketListener.open` with this plan's address, token and TLS."""
        return await WebSocketListener.open(
            self.listen, token=self.token, ssl_context=self.ssl_context, limits=limits
        )

    async def serve(
        self,
        handler: Handler,
        *,
        limits: WebSocketLimits = WebSocketLimits(),
        task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """:func:`serve_websocket` with this plan's address, token and TLS."""
        await serve_websocket(
            self.listen,
            handler,
            token=self.token,
            ssl_context=self.ssl_context,
            limits=limits,
            task_status=task_status,
        )


def plan_listen(
    listen: str,
    *,
    token_file: Path,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    insecure: bool = False,
) -> ListenPlan:
    """Check ``--listen HOST:PORT`` with ``--token-file``, ``--tls-cert``/``--tls-key`` and
    ``--insecure``: a well-formed address, both TLS files or neither, TLS beyond loopback
    unless ``insecure``, a certificate and key that load, and the token (read, or made in a
    new 0600 file: :func:`~acp_bridge.host.tokens.load_or_create_token`).

    Raises:
        ListenRefusedError: one line naming the flag at fault.
        UnsafeFileError: the token file is not a private file of yours, or others can read it.
    """
    host, port = parse_listen(listen)
    if (tls_cert is None) != (tls_key is None):
        raise ListenRefusedError("--tls-cert and --tls-key go together: give both, or neither")
    check_bind(host, tls=tls_cert is not None, insecure=insecure)
    ssl_context = None
    if tls_cert is not None and tls_key is not None:
        try:
            ssl_context = server_ssl_context(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ListenRefusedError(
                f"--tls-cert {tls_cert} --tls-key {tls_key}: cannot use them: {_one_line(exc)}"
            ) from exc
    try:
        token = load_or_create_token(token_file)
    except UnsafeFileError:
        raise
    except OSError as exc:
        raise ListenRefusedError(f"--token-file {token_file}: {_one_line(exc)}") from exc
    return ListenPlan(listen, host, port, token, token_file, ssl_context)


def _one_line(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(text.split()) or type(exc).__name__


class WebSocketListener(Listener[ByteStream]):
    """An anyio listener of WebSocket connections that passed the opening handshake (the
    path, the upgrade, the token; TLS first when ``ssl_context`` is given), so whatever
    serves an anyio listener (the host's ``serve_listener``) serves it as it serves the Unix
    socket. :meth:`open` binds ``HOST:PORT``.

    :meth:`serve` takes a slot of ``max_connections`` before each accept and gives it back
    when the connection's handler returns; the handshake of each connection runs in the
    connection's own task (in ``task_group`` when given), bounded by ``handshake_timeout_s``.
    A handler that raises is logged, and the other connections go on.

    With ``streamable_http`` (the default) the same port serves ACP over Streamable HTTP
    too: a first request that is a POST, a DELETE or an event-stream GET goes to an
    :class:`~acp_bridge.host.http_transport.HttpTransport`, and each HTTP connection it opens
    is handed to the same handler (in ``task_group``).
    """

    def __init__(
        self,
        tcp: MultiListener[SocketStream],
        *,
        token: str,
        ssl_context: ssl.SSLContext | None = None,
        path: str = ACP_PATH,
        limits: WebSocketLimits = WebSocketLimits(),
        streamable_http: bool = True,
    ) -> None:
        self._tcp = tcp
        self._token = token
        self._ssl_context = ssl_context
        self._path = path
        self._limits = limits
        self._slots = anyio.Semaphore(limits.max_connections)  # given back by each connection
        http_limits = HttpLimits(
            max_body_bytes=limits.max_message_bytes, max_connections=limits.max_connections
        )
        self.http = (
            HttpTransport(token=token, path=path, limits=http_limits) if streamable_http else None
        )

    @classmethod
    async def open(
        cls,
        listen: str,
        *,
        token: str,
        ssl_context: ssl.SSLContext | None = None,
        path: str = ACP_PATH,
        limits: WebSocketLimits = WebSocketLimits(),
    ) -> WebSocketListener:
        """Bind ``listen`` (``HOST:PORT``; the caller checked the bind rule, see
        :func:`plan_listen`).

        Raises:
            ListenRefusedError: ``listen`` is no ``HOST:PORT``.
            OSError: the address cannot be listened on.
        """
        host, port = parse_listen(listen)
        tcp = await anyio.create_tcp_listener(local_host=host, local_port=port)
        listener = cls(tcp, token=token, ssl_context=ssl_context, path=path, limits=limits)
        url = websocket_url(host, listener.port, tls=ssl_context is not None, path=path)
        log.info("listening for ACP over WebSocket at %s", url)
        return listener

    @property
    def port(self) -> int:
        """The TCP port bound (the one chosen, when ``HOST:0`` was asked)."""
        port: int = self._tcp.extra(SocketAttribute.local_port)
        return port

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._tcp.extra_attributes

    async def serve(
        self, handler: Callable[[ByteStream], Any], task_group: TaskGroup | None = None
    ) -> None:
        async with anyio.create_task_group() as own:
            connections = own if task_group is None else task_group
            for socket_listener in self._tcp.listeners:  # "localhost": IPv4 and IPv6
                assert isinstance(socket_listener, SocketListener)  # create_tcp_listener's
                own.start_soon(self._accept_loop, socket_listener, handler, connections)

    async def _accept_loop(
        self,
        socket_listener: SocketListener,
        handler: Callable[[ByteStream], Any],
        connections: TaskGroup,
    ) -> None:
        while True:
            await self._slots.acquire()  # taken before accepting: past the bound, the backlog waits
            try:
                stream = await socket_listener.accept()
            except BaseException:
                self._slots.release()
                raise
            connections.start_soon(self._serve_connection, stream, handler, connections)

    async def _serve_connection(
        self, stream: SocketStream, handler: Callable[[ByteStream], Any], connections: TaskGroup
    ) -> None:
        try:
            accepted = None
            with anyio.move_on_after(self._limits.handshake_timeout_s):
                accepted = await _accept(
                    stream,
                    self._token,
                    self._ssl_context,
                    self._path,
                    self._limits,
                    take_http=self.http is not None,
                )
            if accepted is None:
                await _close_quietly(stream)
                return
            if isinstance(accepted, _HttpStart):  # Streamable HTTP: its own request loop
                assert self.http is not None
                await self.http.serve(
                    accepted.stream, accepted.http, accepted.request, handler, connections
                )
                return
            websocket = accepted
            async with websocket, anyio.create_task_group() as tg:
                if self._limits.ping_interval_s is not None:
                    tg.start_soon(websocket.keep_alive, self._limits.ping_interval_s)
                try:
                    await handler(websocket)
                except Exception:  # one connection's failure never ends the others
                    log.exception("the handler of a WebSocket connection failed")
                tg.cancel_scope.cancel()
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        await self._tcp.aclose()


async def serve_websocket(
    listen: str,
    handler: Handler,
    *,
    token: str,
    ssl_context: ssl.SSLContext | None = None,
    path: str = ACP_PATH,
    limits: WebSocketLimits = WebSocketLimits(),
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ACP over WebSocket on ``listen`` (``HOST:PORT``) until cancelled: each connection
    that passes the handshake is handed to ``handler``, which owns it (the stream is closed
    when the handler returns). ``task_status.started`` gets the port (useful with port 0).
    A :class:`WebSocketListener`, opened and served.

    Raises:
        ListenRefusedError: ``listen`` is no ``HOST:PORT``.
        OSError: the address cannot be listened on.
    """
    listener = await WebSocketListener.open(
        listen, token=token, ssl_context=ssl_context, path=path, limits=limits
    )
    async with listener:
        task_status.started(listener.port)
        await listener.serve(handler)


@dataclass(frozen=True)
class _HttpStart:
    """A connection whose first request is Streamable HTTP (read, not answered yet)."""

    stream: ByteStream
    http: h11.Connection
    request: h11.Request


async def _accept(
    stream: ByteStream,
    token: str,
    ssl_context: ssl.SSLContext | None,
    path: str,
    limits: WebSocketLimits,
    *,
    take_http: bool = False,
) -> WebSocketStream | _HttpStart | None:
    """The opening handshake of one connection: the WebSocket, or None when it was refused
    (answered and closed) or broke; with ``take_http``, the first request when it is Streamable
    HTTP."""
    peer = _peer(stream)
    try:
        if ssl_context is not None:
            stream = await TLSStream.wrap(
                stream, server_side=True, ssl_context=ssl_context, standard_compatible=False
            )
        connection = await _upgrade_request(stream, token, path, peer, take_http=take_http)
        if connection is None:
            await _close_quietly(stream)
            return None
        if isinstance(connection, tuple):
            return _HttpStart(stream, *connection)
        log.info("WebSocket connection from %s", peer)
        return WebSocketStream(
            stream,
            connection,
            max_message_bytes=limits.max_message_bytes,
            close_timeout_s=limits.close_timeout_s,
        )
    except (
        anyio.BrokenResourceError,
        anyio.EndOfStream,
        ssl.SSLError,
        OSError,
        WsProtocolError,
        h11.ProtocolError,
    ) as exc:
        log.info("WebSocket handshake with %s failed: %s", peer, exc or type(exc).__name__)
        await _close_quietly(stream)
        return None


async def _upgrade_request(
    stream: ByteStream, token: str, path: str, peer: str, *, take_http: bool = False
) -> Connection | tuple[h11.Connection, h11.Request] | None:
    """Read the HTTP request and answer it: 101 and the open WebSocket connection, or the
    refusal's status and reason (then None); with ``take_http``, a Streamable HTTP request
    is returned unanswered, with its h11 connection."""
    http = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_REQUEST_BYTES)
    request = await _read_request(stream, http)
    if request is not None and take_http and wants_http(request):
        return http, request
    if request is None:
        refusal = Refusal(400, "bad HTTP request")
    else:
        refused = judge_upgrade(request, path=path, token=token)
        if refused is not None:
            refusal = refused
        else:
            websocket = WSConnection(ConnectionType.SERVER)
            try:  # wsproto checks the request again, its own way (HTTP/1.0 without Host, ...)
                websocket.initiate_upgrade_connection(list(request.headers), request.target)
                accept = websocket.send(AcceptConnection())
            except (WsProtocolError, h11.ProtocolError) as exc:
                refusal = Refusal(400, f"bad WebSocket upgrade request: {exc}")
            else:
                await stream.send(accept)
                connection = websocket.connection
                assert connection is not None  # AcceptConnection opened it
                trailing, _ = http.trailing_data
                if trailing:
                    connection.receive_data(trailing)  # frames sent right behind the request
                return connection
    log.info("WebSocket refused to %s: %d %s", peer, refusal.status, refusal.reason)
    await stream.send(b"".join(http.send(event) or b"" for event in refusal.to_h11()))
    return None


async def _read_request(stream: ByteStream, http: h11.Connection) -> h11.Request | None:
    """The request's head (None when it is no HTTP request: answered 400)."""
    while True:
        try:
            event = http.next_event()
        except h11.RemoteProtocolError:
            return None
        if isinstance(event, h11.Request):
            return event
        if event is h11.NEED_DATA:
            try:
                http.receive_data(await stream.receive(_RECEIVE_BYTES))
            except anyio.EndOfStream:
                http.receive_data(b"")
        else:
            return None  # the connection ended first


def _peer(stream: ByteStream) -> str:
    address = stream.extra(SocketAttribute.remote_address, None)
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address)


# --- the client ----------------------------------------------------------------------------------


async def connect_websocket(
    url: str,
    *,
    token: str | None,
    ssl_context: ssl.SSLContext | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> WebSocketStream:
    """Connect to ``url`` (``ws://HOST:PORT/acp`` or ``wss://...``) with the bearer ``token``
    (None: no Authorization header). ``wss://`` verifies the server with ``ssl_context``, the
    system's trust store when None. The caller bounds the time it may take.

    Raises:
        ValueError: not a ws:// or wss:// URL.
        WebSocketRejectedError: the server answered with an HTTP status (401, 404, ...).
        OSError: no connection (refused, unreachable), or TLS failed (ssl.SSLError).
        anyio.BrokenResourceError, anyio.EndOfStream: the server hung up during the handshake.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"{url!r}: expected a ws:// or wss:// URL, e.g. ws://127.0.0.1:8765/acp")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    stream: ByteStream
    if secure:
        context = ssl_context if ssl_context is not None else client_ssl_context()
        stream = await anyio.connect_tcp(
            parts.hostname, port, ssl_context=context, tls_standard_compatible=False
        )
    else:
        stream = await anyio.connect_tcp(parts.hostname, port)
    try:
        connection = await _upgrade(
            stream, url, parts.netloc, _target(parts.path, parts.query), token
        )
    except BaseException:
        await _close_quietly(stream)
        raise
    return WebSocketStream(stream, connection, max_message_bytes=max_message_bytes)


def _target(path: str, query: str) -> str:
    target = path or "/"
    return f"{target}?{query}" if query else target


async def _upgrade(
    stream: ByteStream, url: str, host: str, target: str, token: str | None
) -> Connection:
    websocket = WSConnection(ConnectionType.CLIENT)
    headers = [] if token is None else [(b"authorization", b"Bearer " + token.encode())]
    await stream.send(websocket.send(Request(host=host, target=target, extra_headers=headers)))
    status: int | None = None
    body = bytearray()
    while True:
        websocket.receive_data(await stream.receive(_RECEIVE_BYTES))
        for event in websocket.events():
            if isinstance(event, AcceptConnection):
                assert websocket.connection is not None
                return websocket.connection
            if isinstance(event, RejectConnection):
                status = event.status_code
                if not event.has_body:
                    raise WebSocketRejectedError(url, status, "")
            elif isinstance(event, RejectData):
                body += event.data[: _MAX_REJECTION_BODY_BYTES - len(body)]
                if event.body_finished:
                    assert status is not None
                    reason = body.decode(errors="replace").strip().splitlines()
                    raise WebSocketRejectedError(url, status, reason[0] if reason else "")
