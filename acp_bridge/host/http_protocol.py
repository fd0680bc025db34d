"""ACP over Streamable HTTP, without I/O (issue 22): what each request gets, and where each
message the host writes goes.

The wire, as the ACP transport draft and the TypeScript SDK 2.4.0
(``experimental/http-client``) speak it, all at ``/acp``:

* ``POST`` with one JSON-RPC message (``Content-Type: application/json``). ``initialize``,
  without a connection id, opens a connection: its answer is the response body (200, JSON),
  with the new id in ``Acp-Connection-Id``. Every later POST names that id, and ``Acp-Session-Id``
  when its message names a ``sessionId``; it is answered 202 with no body, and the answer to a
  request comes on an SSE stream.
* ``GET`` with ``Accept: text/event-stream`` and the connection id opens an SSE stream: the
  connection's own (no ``Acp-Session-Id``), or one session's. One reader each (a second is 409).
  Each event is ``data: <one JSON-RPC message>`` and a blank line.
* ``DELETE`` with the connection id ends the connection.

What goes where (:class:`HttpRouting`): a message to the client that names a ``sessionId`` goes
to that session's stream, any other to the connection's; the answer to a client's request
goes where the request came from (its session's stream, the connection's for ``session/load``
and for requests outside a session), and a client's answer to one of our requests must name
the session that request went to. Messages wait in their stream until a reader takes them;
they are counted in bytes (the connection's one bound), and a session stream nobody reads is
bounded in number.

Everything here is pure: bytes and parsed JSON in, decisions out; the I/O is in
:mod:`acp_bridge.host.http_transport`.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

import h11

from acp_bridge.host.ws_protocol import Refusal, _judge_token

__all__ = [
    "CONNECTION_ID_HEADER",
    "DEFAULT_MAX_ID_LENGTH",
    "DEFAULT_MAX_SESSION_STREAMS",
    "SESSION_ID_HEADER",
    "HttpAsk",
    "HttpLimitError",
    "HttpRouting",
    "Outbox",
    "judge_http",
    "read_message",
    "sse_event",
    "wants_http",
]

CONNECTION_ID_HEADER: Final = b"acp-connection-id"
SESSION_ID_HEADER: Final = b"acp-session-id"
EVENT_STREAM: Final = b"text/event-stream"
JSON_TYPE: Final = b"application/json"
DEFAULT_MAX_ID_LENGTH: Final = 1024
"""The longest connection, session or request id taken (as the host's own id bound)."""
DEFAULT_MAX_SESSION_STREAMS: Final = 1024
"""Session streams of one connection that hold messages with no reader: past it, the
connection ends (a client that never reads its sessions holds no memory without bound)."""
SSE_KEEP_ALIVE: Final = b":\n\n"

# Methods whose POST must name its session in Acp-Session-Id (the SDK's list).
_SESSION_METHODS: Final = frozenset(
    {
        "session/cancel",
        "session/close",
        "session/delete",
        "session/fork",
        "session/load",
        "session/prompt",
        "session/resume",
        "session/set_config_option",
        "session/set_mode",
        "session/set_model",
    }
)
_ALLOWED: Final = ((b"allow", b"GET, POST, DELETE"),)

Route = str | None
"""Where a message goes: a session id, or None for the connection's own stream."""
IdKey = tuple[str, Any]


class HttpLimitError(Exception):
    """A connection passed a bound it cannot be served past (it is then ended)."""


def wants_http(request: h11.Request) -> bool:
    """True for a request that is Streamable HTTP rather than a WebSocket upgrade (or a
    stray GET, which the WebSocket judge answers 426): a POST, a DELETE, or a GET that
    accepts ``text/event-stream`` and asks no upgrade."""
    headers = _headers(request)
    if headers.get(b"upgrade", b"").lower() == b"websocket":
        return False
    if request.method in (b"POST", b"DELETE"):
        return True
    return request.method == b"GET" and EVENT_STREAM in headers.get(b"accept", b"").lower()


@dataclass(frozen=True)
class HttpAsk:
    """A request that passed :func:`judge_http`: its method and the ids it names."""

    method: bytes
    connection_id: str | None
    session_id: str | None


def judge_http(
    request: h11.Request, *, path: str, token: str, max_id_length: int = DEFAULT_MAX_ID_LENGTH
) -> HttpAsk | Refusal:
    """What ``request`` gets before any connection is looked up: a refusal (404 another path,
    401 without the bearer token, 405 another method, 406 a GET that takes no event stream,
    415 a POST that is no JSON, 400 a malformed or over-long id), else what it asks."""
    if request.target.split(b"?", 1)[0] != path.encode():
        return Refusal(404, f"no such endpoint; ACP is served at {path}")
    headers = _headers(request)
    refused = _judge_token(headers.get(b"authorization"), token)
    if refused is not None:
        return refused
    if request.method not in (b"GET", b"POST", b"DELETE"):
        return Refusal(405, "Streamable HTTP takes POST, GET and DELETE", _ALLOWED)
    if request.method == b"GET" and EVENT_STREAM not in headers.get(b"accept", b"").lower():
        return Refusal(406, "a GET here opens an event stream: Accept: text/event-stream")
    if request.method == b"POST":
        content_type = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
        if content_type != JSON_TYPE:
            return Refusal(415, "a POST carries one JSON-RPC message: application/json")
    ids: list[str | None] = []
    for name in (CONNECTION_ID_HEADER, SESSION_ID_HEADER):
        raw = headers.get(name)
        if raw is None:
            ids.append(None)
            continue
        try:
            value = raw.decode("ascii") if name == CONNECTION_ID_HEADER else raw.decode()
        except UnicodeDecodeError:
            return Refusal(400, f"malformed {name.decode()} header")
        if not value or len(value) > max_id_length:
            return Refusal(400, f"{name.decode()} is empty or longer than {max_id_length}")
        ids.append(value)
    return HttpAsk(request.method, ids[0], ids[1])


def read_message(body: bytes) -> dict[str, Any] | Refusal:
    """A POST body as one JSON-RPC message (an object), or the 400 it gets."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return Refusal(400, "the body is not JSON")
    if isinstance(value, list):
        return Refusal(400, "JSON-RPC batches are not taken: one message per POST")
    if not isinstance(value, dict):
        return Refusal(400, "the body is no JSON-RPC message (a JSON object)")
    return value


def sse_event(line: bytes) -> bytes:
    """One JSON-RPC message (a compact JSON line, its ``\\n`` optional) as an SSE event."""
    return b"data: " + line.rstrip(b"\n") + b"\n\n"


def is_initialize(message: dict[str, Any]) -> bool:
    return message.get("method") == "initialize" and "id" in message


def id_key(value: Any) -> IdKey | None:
    """A JSON-RPC id as a key (``1`` and ``"1"`` stay apart), None for no usable id."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return (type(value).__name__, value)


def _headers(request: h11.Request) -> dict[bytes, bytes]:
    joined: dict[bytes, bytes] = {}
    for name, value in request.headers:
        joined[name] = joined[name] + b", " + value if name in joined else value
    return joined


def _session_of(message: dict[str, Any]) -> str | None:
    params = message.get("params")
    if isinstance(params, dict):
        session = params.get("sessionId")
        if isinstance(session, str):
            return session
    return None


@dataclass(eq=False)
class Outbox:
    """One SSE stream's messages (each a JSON line without its ``\\n``) and its reader."""

    lines: deque[bytes] = field(default_factory=deque)
    has_reader: bool = False


class HttpRouting:
    """The routing state of one Streamable HTTP connection (see the module's text).

    The I/O code calls :meth:`inbound` for each POSTed message before handing it to the
    host, :meth:`outbound` for each line the host writes, :meth:`acquire`, :meth:`take` and
    :meth:`release` as SSE streams read, and waits on :attr:`has_room` to push more.
    """

    def __init__(
        self,
        *,
        max_buffered_bytes: int,
        max_id_length: int = DEFAULT_MAX_ID_LENGTH,
        max_session_streams: int = DEFAULT_MAX_SESSION_STREAMS,
    ) -> None:
        self.max_buffered_bytes = max_buffered_bytes
        self.max_id_length = max_id_length
        self.max_session_streams = max_session_streams
        self.connection = Outbox()
        self.sessions: dict[str, Outbox] = {}
        self.buffered_bytes = 0
        self._answer_routes: dict[IdKey, Route] = {}  # the client's requests: where to answer
        self._reply_routes: dict[IdKey, Route] = {}  # our requests: where the reply must name

    def __repr__(self) -> str:
        return (
            f"<HttpRouting {len(self.sessions)} session streams, {self.buffered_bytes} bytes "
            f"buffered, {len(self._answer_routes)} requests open>"
        )

    @property
    def has_room(self) -> bool:
        return self.buffered_bytes < self.max_buffered_bytes

    @property
    def has_reader(self) -> bool:
        """True while some SSE stream of the connection has a reader."""
        return self.connection.has_reader or any(o.has_reader for o in self.sessions.values())

    # -- the client's messages --------------------------------------------------------------

    def inbound(self, message: dict[str, Any], header_session: str | None) -> Refusal | None:
        """Check a POSTed message against ``Acp-Session-Id`` and note where its answer goes;
        the refusal (400) when it does not fit."""
        if "method" not in message and "id" in message:
            return self._inbound_reply(message, header_session)
        method = message.get("method")
        session = _session_of(message)
        if header_session is None and (session is not None or method in _SESSION_METHODS):
            return Refusal(400, "Missing Acp-Session-Id")
        if header_session is not None and session is not None and header_session != session:
            return Refusal(400, "Mismatched Acp-Session-Id")
        route = header_session if header_session is not None else session
        if route is not None and len(route) > self.max_id_length:
            return Refusal(400, f"the session id is longer than {self.max_id_length}")
        request_id = message.get("id")
        if isinstance(request_id, str) and len(request_id) > self.max_id_length:
            return Refusal(400, f"the request id is longer than {self.max_id_length}")
        key = id_key(request_id)
        if key is not None:
            self._answer_routes[key] = None if method == "session/load" else route
        return None

    def _inbound_reply(self, message: dict[str, Any], header_session: str | None) -> Refusal | None:
        key = id_key(message.get("id"))
        route = self._reply_routes.get(key) if key is not None else None
        if route is not None and header_session is None:
            return Refusal(400, "Missing Acp-Session-Id")
        if route is not None and header_session != route:
            return Refusal(400, "Mismatched Acp-Session-Id")
        if key is not None:
            self._reply_routes.pop(key, None)
        return None

    # -- the host's messages ----------------------------------------------------------------

    def outbound(self, line: bytes) -> Route:
        """Queue one line the host wrote on the stream it belongs to; returns that route.

        Raises:
            HttpLimitError: a new session stream with no reader would pass the bound.
        """
        line = line.rstrip(b"\n")
        try:
            message = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            message = None
        route: Route = None
        if isinstance(message, dict):
            key = id_key(message.get("id"))
            if "method" not in message:  # an answer to the client's request
                route = self._answer_routes.pop(key, None) if key is not None else None
            else:
                route = _session_of(message)
                if key is not None:
                    self._reply_routes[key] = route
        self._outbox(route, bounded=True).lines.append(line)
        self.buffered_bytes += len(line)
        return route

    def _outbox(self, route: Route, *, bounded: bool = False) -> Outbox:
        if route is None:
            return self.connection
        outbox = self.sessions.get(route)
        if outbox is None:
            unread = sum(1 for o in self.sessions.values() if not o.has_reader)
            if bounded and unread >= self.max_session_streams:
                raise HttpLimitError(
                    f"more than {self.max_session_streams} session streams with no reader"
                )
            outbox = self.sessions[route] = Outbox()
        return outbox

    # -- the SSE streams --------------------------------------------------------------------

    def acquire(self, route: Route) -> bool:
        """Make the caller the reader of ``route``'s stream; False when it has one (409)."""
        outbox = self._outbox(route)
        if outbox.has_reader:
            return False
        outbox.has_reader = True
        return True

    def take(self, route: Route) -> bytes | None:
        """The next line of ``route``'s stream (no ``\\n``), or None when it holds none."""
        outbox = self._outbox(route)
        if not outbox.lines:
            return None
        line = outbox.lines.popleft()
        self.buffered_bytes -= len(line)
        return line

    def release(self, route: Route) -> None:
        """The reader of ``route``'s stream is gone; an empty session stream is dropped."""
        outbox = self._outbox(route)
        outbox.has_reader = False
        if route is not None and not outbox.lines:
            del self.sessions[route]

    def discard(self) -> None:
        """The connection ended: what no reader took is dropped."""
        self.connection.lines.clear()
        for outbox in self.sessions.values():
            outbox.lines.clear()
        self.buffered_bytes = 0
