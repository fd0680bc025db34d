"""ACP over WebSocket, without I/O (issue 22): the rules of ``serve --listen`` and the framing.

What the ACP transport draft (and the TypeScript SDK 2.4.0's WebSocket transport) says: one
JSON-RPC message per WebSocket *text* message, at the path ``/acp``. What the host's code reads
and writes is newline-delimited JSON, as on the Unix socket. This module turns one into the
other, as h11 does for HTTP: bytes in, events or bytes out, no sockets, no clock.

* :class:`LineFraming` sits on an open :class:`wsproto.connection.Connection`. Received text
  messages come out as their UTF-8 bytes followed by ``b"\\n"`` (pieces of a long message come
  out as they arrive, so a 64 MiB message is never held twice); bytes to send are cut at each
  ``b"\\n"`` into one text message per line (an unfinished last line is sent as the first
  fragment of its message, so nothing is buffered). Pings are answered, the close handshake is
  followed, and a message over ``max_message_bytes`` (close 1009), holding a newline (1007: it
  would read as two messages), binary (1003) or malformed (wsproto's code) ends the connection.
* :func:`judge_upgrade` decides what an HTTP request gets before any WebSocket exists: 404 for
  another path, 405 for another method, 426/400 for a request that is no WebSocket upgrade, 401
  without the right bearer token (compared in constant time).
* :func:`parse_listen` and :func:`check_bind`: ``--listen HOST:PORT``, and the rule that a bind
  beyond loopback needs TLS unless ``--insecure`` is given.
"""

from __future__ import annotations

import codecs
import enum
import hmac
import ipaddress
from dataclasses import dataclass, field
from typing import Final

import h11
from wsproto.connection import Connection, ConnectionState
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason

from acp_bridge.errors import BridgeError, LocalProtocolError

__all__ = [
    "ACP_PATH",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Ending",
    "LineFraming",
    "ListenRefusedError",
    "Received",
    "Refusal",
    "check_bind",
    "is_loopback",
    "judge_upgrade",
    "parse_listen",
    "websocket_url",
]

ACP_PATH: Final = "/acp"
"""Where ACP is served, as the transport draft names it."""
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
"""The largest message taken, as the line cap of the JSON-RPC peer (64 MiB)."""

_WEBSOCKET_VERSION: Final = b"13"
_CLEAN_CLOSE_CODES: Final = frozenset(
    {CloseReason.NORMAL_CLOSURE, CloseReason.GOING_AWAY, CloseReason.NO_STATUS_RCVD}
)
"""Close codes that end the stream as such; any other (1009, 1011, ...) says something broke."""


class ListenRefusedError(BridgeError):
    """``--listen`` and its flags ask for something acp-bridge will not do: a malformed
    address, a bind beyond loopback without TLS, half a TLS pair, a certificate that does not
    load. One line, naming the flags that change it."""


# --- listening ---------------------------------------------------------------------------------


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) as ``(host, port)``.

    Raises:
        ListenRefusedError: not of that shape, or the port is not 0..65535.
    """
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        sep = ""  # an IPv6 address needs its brackets, or the port cannot be told apart
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ListenRefusedError(
            f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8765 or [::1]:8765"
        )
    return host, int(port_text)


def websocket_url(host: str, port: int, *, tls: bool, path: str = ACP_PATH) -> str:
    """The URL a client connects to (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"{'wss' if tls else 'ws'}://{shown}:{port}{path}"


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (an IPv4-mapped loopback too): addresses
    only this machine reaches. Any other name is not resolved, and counts as beyond."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_bind(host: str, *, tls: bool, insecure: bool) -> None:
    """Refuse to listen beyond loopback without TLS, unless ``insecure`` says so on purpose:
    the bearer token and every prompt would cross the network in clear.

    Raises:
        ListenRefusedError: one line naming the flags.
    """
    if tls or insecure or is_loopback(host):
        return
    raise ListenRefusedError(
        f"--listen on {host} reaches beyond this machine: give --tls-cert and --tls-key, "
        "or --insecure to send the token and prompts unencrypted on purpose"
    )


# --- the opening handshake -----------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """The HTTP answer to a request that gets no WebSocket: status, one-line reason (the
    body), and headers the status calls for."""

    status: int
    reason: str
    headers: tuple[tuple[bytes, bytes], ...] = ()

    def to_h11(self) -> tuple[h11.Response, h11.Data, h11.EndOfMessage]:
        """The response's events, for an h11 server connection (the connection is closed
        after it)."""
        body = self.reason.encode() + b"\n"
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *self.headers,
        ]
        response = h11.Response(status_code=self.status, headers=headers)
        return response, h11.Data(body), h11.EndOfMessage()


def judge_upgrade(request: h11.Request, *, path: str, token: str) -> Refusal | None:
    """None when ``request`` may become a WebSocket at ``path``, else the refusal it gets.

    In this order: another path is 404; another method 405; a request that asks no WebSocket
    upgrade 426 (with the ``Upgrade`` header saying what to ask); a malformed upgrade 400 (426
    for another WebSocket version, naming 13); then the bearer token: missing or wrong is 401.
    """
    target = request.target.split(b"?", 1)[0]
    if target != path.encode():
        return Refusal(404, f"no such endpoint; ACP is served at {path}")
    if request.method != b"GET":
        return Refusal(405, "a WebSocket upgrade is a GET", ((b"allow", b"GET"),))
    headers = _headers(request)
    upgrade = headers.get(b"upgrade", b"").lower()
    connection = {part.strip().lower() for part in headers.get(b"connection", b"").split(b",")}
    if upgrade != b"websocket" and b"upgrade" not in connection:
        return Refusal(
            426,
            "ACP here is served over WebSocket: send an upgrade request",
            ((b"upgrade", b"websocket"), (b"connection", b"Upgrade")),
        )
    if upgrade != b"websocket" or b"upgrade" not in connection:
        return Refusal(400, "a WebSocket upgrade needs Upgrade: websocket and Connection: Upgrade")
    if headers.get(b"sec-websocket-version") != _WEBSOCKET_VERSION:
        return Refusal(
            426, "WebSocket version 13 is the one served", ((b"sec-websocket-version", b"13"),)
        )
    if not headers.get(b"sec-websocket-key"):
        return Refusal(400, "the upgrade request has no Sec-WebSocket-Key")
    if not headers.get(b"host"):
        return Refusal(400, "the upgrade request has no Host header")
    return _judge_token(headers.get(b"authorization"), token)


def _judge_token(authorization: bytes | None, token: str) -> Refusal | None:
    challenge = ((b"www-authenticate", b'Bearer realm="acp-bridge"'),)
    if authorization is None:
        return Refusal(401, "missing bearer token (Authorization: Bearer <token>)", challenge)
    scheme, _, given = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not given.strip():
        return Refusal(401, "the Authorization header is not a bearer token", challenge)
    if not hmac.compare_digest(given.strip(), token.encode()):
        return Refusal(401, "wrong bearer token", challenge)
    return None


def _headers(request: h11.Request) -> dict[bytes, bytes]:
    """Header name (lower case, h11's) -> value; a repeated header's values joined by commas."""
    joined: dict[bytes, bytes] = {}
    for name, value in request.headers:
        joined[name] = joined[name] + b", " + value if name in joined else value
    return joined


# --- messages <-> lines --------------------------------------------------------------------------


class Ending(enum.Enum):
    """How the WebSocket ended, as the reader of its lines sees it."""

    CLOSED = "closed"
    """A normal close (1000, 1001, or no code) between two messages: every line was whole."""
    BROKEN = "broken"
    """A protocol error (ours or the peer's close code says so), a close in the middle of a
    message, or the connection lost."""


@dataclass
class Received:
    """What :meth:`LineFraming.receive_data` made of the bytes fed: ``data`` for the reader (in
    order; each message ends with ``b"\\n"``), ``reply`` to send to the peer now (pongs, close
    frames), and ``ending`` once the connection is over (then send ``reply``, and close)."""

    data: list[bytes] = field(default_factory=list)
    reply: bytearray = field(default_factory=bytearray)
    ending: Ending | None = None


class LineFraming:
    """Lines over an open WebSocket connection (see the module's text).

    ``close_code`` and ``close_reason`` say how it ended once it did: the peer's close frame,
    or ours.

    Raises:
        ValueError: ``max_message_bytes`` is not positive.
    """

    def __init__(self, connection: Connection, *, max_message_bytes: int) -> None:
        if max_message_bytes < 1:
            raise ValueError("max_message_bytes must be positive")
        self.max_message_bytes: Final = max_message_bytes
        self.close_code: int | None = None
        self.close_reason: str = ""
        self._connection = connection
        self._in_message = 0  # bytes of the message being received, 0 between messages
        self._partial_in = False  # a message started and not finished (may be empty so far)
        self._partial_out = False  # a message we sent the first fragment of
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._ending: Ending | None = None
        self._parse_failed = False  # wsproto gave up on the peer's bytes

    def __repr__(self) -> str:
        state = self._connection.state.name
        return f"<LineFraming {state}, close {self.close_code}, {self._in_message} bytes in>"

    @property
    def is_open(self) -> bool:
        """True while messages may still be sent (no close frame sent or received)."""
        return self._connection.state is ConnectionState.OPEN

    @property
    def is_closed(self) -> bool:
        """True once the close handshake is done both ways (or the connection was lost)."""
        return self._connection.state is ConnectionState.CLOSED

    @property
    def ending(self) -> Ending | None:
        return self._ending

    @property
    def awaits_close_reply(self) -> bool:
        """True when we sent a close frame and the peer's can still come and be read: the
        transport is closed only after it (or a bounded wait), so that the peer reads ours
        (closing a TCP connection with unread data resets it, and the close frame is lost)."""
        return self._connection.state is ConnectionState.LOCAL_CLOSING and not self._parse_failed

    def receive_data(self, data: bytes | None) -> Received:
        """Feed bytes read from the peer (None: the transport ended) and get what they mean."""
        out = Received()
        if self._connection.state is ConnectionState.CLOSED:
            return out  # the handshake is over: whatever follows is of no use
        if self._parse_failed:
            return out  # wsproto stopped parsing: the bytes cannot be read any more
        self._connection.receive_data(data)
        # Every event is looked at, even after the end: the peer's close frame, which ends
        # the close handshake, may follow what is no longer read.
        for event in self._connection.events():
            if isinstance(event, TextMessage):
                self._text(event, out)
            elif isinstance(event, Ping):
                if self.is_open:
                    out.reply += self._connection.send(event.response())
            elif isinstance(event, CloseConnection):
                self._closed(event, out)
            elif isinstance(event, BytesMessage) and self._ending is None:
                reason = "ACP messages are text, not binary"
                self._fail(CloseReason.UNSUPPORTED_DATA, reason, out)
            # Pong: nothing more to do (its bytes arriving are the answer a keep-alive waits for).
        out.ending = self._ending
        return out

    def _text(self, event: TextMessage, out: Received) -> None:
        if self._ending is not None:
            return
        if "\n" in event.data:
            self._fail(
                CloseReason.INVALID_FRAME_PAYLOAD_DATA,
                "a message holds a newline: one JSON-RPC message per text message",
                out,
            )
            return
        piece = event.data.encode()
        self._in_message += len(piece)
        if self._in_message > self.max_message_bytes:
            self._fail(
                CloseReason.MESSAGE_TOO_BIG,
                f"message longer than {self.max_message_bytes} bytes",
                out,
            )
            return
        self._partial_in = not event.message_finished
        if piece:
            out.data.append(piece)
        if event.message_finished:
            out.data.append(b"\n")
            self._in_message = 0

    def _closed(self, event: CloseConnection, out: Received) -> None:
        state = self._connection.state
        if self.close_code is None:
            self.close_code, self.close_reason = event.code, event.reason or ""
        if state is ConnectionState.OPEN:
            # wsproto could not parse the peer's frames: it says so as a close event of its
            # own, and the close frame is ours to send.
            self._parse_failed = True
            self._fail(event.code, event.reason or "malformed frames", out)
            return
        if state is ConnectionState.REMOTE_CLOSING:  # the peer began: answer in kind
            out.reply += self._connection.send(event.response())
        if self._ending is None:
            mid_message = self._partial_in or self._in_message > 0
            clean = event.code in _CLEAN_CLOSE_CODES and not mid_message
            self._ending = Ending.CLOSED if clean else Ending.BROKEN

    def _fail(self, code: int, reason: str, out: Received) -> None:
        """A protocol error of the peer's: our close frame with ``code``, and the end."""
        self.close_code, self.close_reason = code, reason
        if self._connection.state is ConnectionState.OPEN:
            out.reply += self._connection.send(CloseConnection(code=code, reason=reason))
        self._ending = Ending.BROKEN

    def frames_for(self, data: bytes) -> bytes:
        """The frames that send ``data``: one text message per ``\\n``-ended line (an empty
        line is no message), and an unfinished last line as the first fragment of the next.

        Raises:
            LocalProtocolError: ``data`` is not UTF-8 (lines of JSON always are), or the
                connection is no longer open (check :attr:`is_open` first).
        """
        if not self.is_open:
            raise LocalProtocolError("the WebSocket is closing: no more messages may be sent")
        lines = data.split(b"\n")
        tail = lines.pop()
        frames = bytearray()
        connection = self._connection
        try:
            for line in lines:
                if line or self._partial_out:
                    text = self._decoder.decode(line, True)
                    frames += connection.send(TextMessage(data=text, message_finished=True))
                    self._partial_out = False
            if tail:
                text = self._decoder.decode(tail, False)
                frames += connection.send(TextMessage(data=text, message_finished=False))
                self._partial_out = True
        except UnicodeDecodeError as exc:
            raise LocalProtocolError(f"a line to send is not UTF-8: {exc}") from exc
        return bytes(frames)

    def close_frame(self, code: int = CloseReason.NORMAL_CLOSURE, reason: str = "") -> bytes:
        """Our close frame, to begin the close handshake (b"" if one was sent or answered)."""
        if not self.is_open and self._connection.state is not ConnectionState.REMOTE_CLOSING:
            return b""
        if self.close_code is None:
            self.close_code, self.close_reason = code, reason
        return self._connection.send(CloseConnection(code=code, reason=reason or None))

    def ping_frame(self, payload: bytes = b"") -> bytes:
        """A ping (the peer answers with a pong carrying ``payload``)."""
        return self._connection.send(Ping(payload=payload))
