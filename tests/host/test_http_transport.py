"""Streamable HTTP on the WebSocket listener's port (host/http_transport.py), with a raw HTTP
client (h11 over anyio TCP) on both anyio backends, and the pure routing rules
(host/http_protocol.py) without any I/O."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import h11
import pytest
import trustme
from anyio.abc import ByteStream, SocketStream

from acp_bridge.host.http_protocol import (
    HttpAsk,
    HttpLimitError,
    HttpRouting,
    judge_http,
    read_message,
    wants_http,
)
from acp_bridge.host.http_transport import HttpConnection, HttpLimits
from acp_bridge.host.websocket import WebSocketLimits, WebSocketListener, client_ssl_context
from acp_bridge.host.ws_protocol import Refusal
from acp_bridge.rpc.peer import JsonRpcPeer

TOKEN = "t0ken"
AUTH = (b"authorization", b"Bearer " + TOKEN.encode())


# --- the pure part -------------------------------------------------------------------------------


def _request(method: bytes = b"POST", *headers: tuple[bytes, bytes], target: bytes = b"/acp"):
    base = [(b"host", b"x"), AUTH]
    if method == b"POST":
        base.append((b"content-type", b"application/json"))
    if method == b"GET":
        base.append((b"accept", b"text/event-stream"))
    return h11.Request(method=method, target=target, headers=[*base, *headers])


def test_what_goes_to_http_and_what_to_the_websocket_judge() -> None:
    assert wants_http(_request(b"POST")) and wants_http(_request(b"DELETE"))
    assert wants_http(_request(b"GET"))
    plain_get = h11.Request(method=b"GET", target=b"/acp", headers=[(b"host", b"x")])
    assert not wants_http(plain_get)  # the WebSocket judge answers it 426
    upgrade = _request(b"GET", (b"upgrade", b"websocket"), (b"connection", b"Upgrade"))
    assert not wants_http(upgrade)


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (_request(target=b"/other"), 404),
        (h11.Request(method=b"POST", target=b"/acp", headers=[(b"host", b"x")]), 401),
        (_request(b"PUT"), 405),
        (h11.Request(method=b"GET", target=b"/acp", headers=[(b"host", b"x"), AUTH]), 406),
        (h11.Request(method=b"POST", target=b"/acp", headers=[(b"host", b"x"), AUTH]), 415),
        (_request(b"POST", (b"acp-connection-id", b"x" * 2000)), 400),
    ],
)
def test_refusals_before_any_connection_is_looked_up(request_: h11.Request, status: int) -> None:
    judged = judge_http(request_, path="/acp", token=TOKEN)
    assert isinstance(judged, Refusal) and judged.status == status, judged


def test_a_request_names_its_connection_and_session() -> None:
    judged = judge_http(
        _request(b"GET", (b"acp-connection-id", b"c1"), (b"acp-session-id", b"s1")),
        path="/acp",
        token=TOKEN,
    )
    assert judged == HttpAsk(b"GET", "c1", "s1")


def test_a_body_is_one_json_object() -> None:
    assert read_message(b'{"jsonrpc":"2.0","method":"x"}') == {"jsonrpc": "2.0", "method": "x"}
    for body in (b"{", b"[1]", b"3"):
        refused = read_message(body)
        assert isinstance(refused, Refusal) and refused.status == 400


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_messages_go_to_the_stream_of_their_session() -> None:
    routing = HttpRouting(max_buffered_bytes=1000)
    # The client's session/new (no session): its answer on the connection's stream.
    assert routing.inbound({"jsonrpc": "2.0", "id": 1, "method": "session/new"}, None) is None
    created = {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}
    assert routing.outbound(_line(created)) is None
    # A prompt in session s: its updates and its answer on s's stream.
    prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s"}}
    assert routing.inbound(prompt, "s") is None
    update = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}}
    assert routing.outbound(_line(update)) == "s"
    assert routing.outbound(_line({"jsonrpc": "2.0", "id": 2, "result": {}})) == "s"
    # session/load is answered on the connection's stream, its replay on the session's.
    load = {"jsonrpc": "2.0", "id": "3", "method": "session/load", "params": {"sessionId": "s"}}
    assert routing.inbound(load, "s") is None
    assert routing.outbound(_line({"jsonrpc": "2.0", "id": "3", "result": {}})) is None
    assert routing.acquire("s") and not routing.acquire("s")  # one reader: a second is 409
    assert routing.take("s") == json.dumps(update).encode()
    assert routing.take("s") is not None and routing.take("s") is None
    routing.release("s")
    assert "s" not in routing.sessions  # empty and unread: dropped
    assert routing.buffered_bytes == sum(len(line) for line in routing.connection.lines)


def test_a_session_message_must_name_its_session() -> None:
    routing = HttpRouting(max_buffered_bytes=1000)
    prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s"}}
    missing = routing.inbound(prompt, None)
    assert isinstance(missing, Refusal) and missing.reason == "Missing Acp-Session-Id"
    other = routing.inbound(prompt, "t")
    assert isinstance(other, Refusal) and other.reason == "Mismatched Acp-Session-Id"
    # Our request in session s: the client's answer must name s.
    ask = {"jsonrpc": "2.0", "id": 7, "method": "session/request_permission",
           "params": {"sessionId": "s"}}  # fmt: skip
    assert routing.outbound(_line(ask)) == "s"
    reply = {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert isinstance(routing.inbound(reply, None), Refusal)
    assert isinstance(routing.inbound(reply, "t"), Refusal)
    assert routing.inbound(reply, "s") is None


def test_session_streams_nobody_reads_are_bounded() -> None:
    routing = HttpRouting(max_buffered_bytes=10_000, max_session_streams=2)
    for session in ("a", "b"):
        routing.outbound(_line({"jsonrpc": "2.0", "method": "x", "params": {"sessionId": session}}))
    with pytest.raises(HttpLimitError):
        routing.outbound(_line({"jsonrpc": "2.0", "method": "x", "params": {"sessionId": "c"}}))
    assert routing.has_room
    routing.outbound(b"x" * 10_000)
    assert not routing.has_room  # the I/O side waits for readers now


# --- over TCP ------------------------------------------------------------------------------------


@dataclass
class Agent:
    """A minimal ACP agent on each HTTP connection; records what it saw."""

    ended: anyio.Event = field(default_factory=anyio.Event)
    permission: dict[str, Any] = field(default_factory=dict)

    async def __call__(self, stream: ByteStream) -> None:
        peer = JsonRpcPeer(stream, stream, name="http-agent")

        async def initialize(params: Any) -> dict[str, Any]:
            return {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}

        async def new_session(params: Any) -> dict[str, Any]:
            return {"sessionId": "s1"}

        async def prompt(params: Any) -> dict[str, Any]:
            text = {"type": "text", "text": "hi"}
            chunk = {"sessionUpdate": "agent_message_chunk", "content": text}
            await peer.notify("session/update", {"sessionId": params["sessionId"], "update": chunk})
            ask = {"sessionId": params["sessionId"], "toolCall": {"toolCallId": "t"}, "options": []}
            self.permission = await peer.request("session/request_permission", ask)
            return {"stopReason": "end_turn"}

        peer.on_request("initialize", initialize)
        peer.on_request("session/new", new_session)
        peer.on_request("session/prompt", prompt)
        try:
            await peer.run()
        finally:
            self.ended.set()


@asynccontextmanager
async def listening(
    agent: Agent, limits: WebSocketLimits | None = None
) -> AsyncIterator[WebSocketListener]:
    limits = limits or WebSocketLimits()
    listener = await WebSocketListener.open("127.0.0.1:0", token=TOKEN, limits=limits)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, agent)
        try:
            yield listener
        finally:
            tg.cancel_scope.cancel()
    await listener.aclose()


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


async def call(
    port: int,
    method: bytes,
    body: Any = None,
    *,
    connection: str | None = None,
    session: str | None = None,
    token: str | None = TOKEN,
) -> Answer:
    """One request on a TCP connection of its own; the whole answer."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    async with stream:
        http = h11.Connection(h11.CLIENT)
        return await call_on(stream, http, method, body, connection, session, token)


async def call_on(
    stream: ByteStream,
    http: h11.Connection,
    method: bytes,
    body: Any = None,
    connection: str | None = None,
    session: str | None = None,
    token: str | None = TOKEN,
) -> Answer:
    """One request on an open connection (``http`` ready for it); the whole answer."""
    await _send_request(stream, http, method, body, connection, session, token)
    response = await _next(stream, http)
    assert isinstance(response, h11.Response)
    data = bytearray()
    while True:
        event = await _next(stream, http)
        if isinstance(event, h11.Data):
            data += event.data
        else:
            break
    return Answer(response.status_code, dict(response.headers), bytes(data))


async def _send_request(
    stream: ByteStream,
    http: h11.Connection,
    method: bytes,
    body: Any,
    connection: str | None,
    session: str | None,
    token: str | None,
) -> None:
    headers = [(b"host", b"127.0.0.1")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if connection is not None:
        headers.append((b"acp-connection-id", connection.encode()))
    if session is not None:
        headers.append((b"acp-session-id", session.encode()))
    payload = b""
    if method == b"POST":
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers += [(b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode())]  # fmt: skip
    if method == b"GET":
        headers.append((b"accept", b"text/event-stream"))
    data = http.send(h11.Request(method=method, target=b"/acp", headers=headers)) or b""
    if payload:
        data += http.send(h11.Data(payload)) or b""
    data += http.send(h11.EndOfMessage()) or b""
    await stream.send(data)


async def _next(stream: ByteStream, http: h11.Connection) -> Any:
    while True:
        event = http.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            http.receive_data(await stream.receive())
        except anyio.EndOfStream:
            http.receive_data(b"")


class EventStream:
    """An SSE GET, read event by event."""

    def __init__(self, stream: SocketStream, http: h11.Connection, status: int) -> None:
        self.stream, self.http, self.status = stream, http, status
        self._buffer = b""

    async def next(self) -> dict[str, Any] | None:
        """The next message (keep-alive comments skipped), None when the stream ended."""
        while True:
            event, sep, rest = self._buffer.partition(b"\n\n")
            if sep:
                self._buffer = rest
                if event.startswith(b"data: "):
                    message: dict[str, Any] = json.loads(event[len(b"data: ") :])
                    return message
                continue
            got = await _next(self.stream, self.http)
            if not isinstance(got, h11.Data):
                return None
            self._buffer += got.data


@asynccontextmanager
async def events(
    port: int, connection: str, session: str | None = None
) -> AsyncIterator[EventStream]:
    stream = await anyio.connect_tcp("127.0.0.1", port)
    async with stream:
        http = h11.Connection(h11.CLIENT)
        await _send_request(stream, http, b"GET", None, connection, session, TOKEN)
        response = await _next(stream, http)
        assert isinstance(response, h11.Response)
        yield EventStream(stream, http, response.status_code)


def rpc(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


async def _initialize(port: int) -> str:
    answer = await call(port, b"POST", rpc(0, "initialize", {"protocolVersion": 1}))
    assert answer.status == 200, answer
    assert json.loads(answer.body)["result"]["protocolVersion"] == 1
    return answer.headers[b"acp-connection-id"].decode()


@pytest.mark.anyio
async def test_a_turn_over_streamable_http() -> None:
    agent = Agent()
    async with listening(agent) as listener:
        port = listener.port
        connection = await _initialize(port)
        async with events(port, connection) as own:
            assert own.status == 200
            new = rpc(1, "session/new", {"cwd": "/", "mcpServers": []})
            assert (await call(port, b"POST", new, connection=connection)).status == 202
            answered = await own.next()
            assert answered == {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}
            async with events(port, connection, "s1") as session:
                async with events(port, connection, "s1") as second:
                    assert second.status == 409  # one reader per stream
                prompt = rpc(2, "session/prompt", {"sessionId": "s1", "prompt": []})
                posted = await call(port, b"POST", prompt, connection=connection, session="s1")
                assert posted.status == 202 and posted.body == b""
                update = await session.next()
                assert update is not None and update["method"] == "session/update"
                ask = await session.next()
                assert ask is not None and ask["method"] == "session/request_permission"
                reply = {"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": "x"}}
                wrong = await call(port, b"POST", reply, connection=connection)
                assert wrong.status == 400 and b"Missing Acp-Session-Id" in wrong.body
                right = await call(port, b"POST", reply, connection=connection, session="s1")
                assert right.status == 202
                assert await session.next() == {
                    "jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}
                }  # fmt: skip
                assert agent.permission == {"outcome": "x"}
                deleted = await call(port, b"DELETE", connection=connection)
                assert deleted.status == 202
                assert await session.next() is None  # the stream ends with the connection
            await agent.ended.wait()  # the handler read the end of its stream
            gone = await call(port, b"POST", rpc(3, "session/list", {}), connection=connection)
            assert gone.status == 404


@pytest.mark.anyio
async def test_refusals_over_tcp() -> None:
    agent = Agent()
    limits = WebSocketLimits(max_message_bytes=1000)
    async with listening(agent, limits) as listener:
        port = listener.port
        init = rpc(0, "initialize", {"protocolVersion": 1})
        no_token = await call(port, b"POST", init, token=None)
        assert no_token.status == 401 and b"bearer" in no_token.headers[b"www-authenticate"].lower()
        assert (await call(port, b"POST", init, token="wrong")).status == 401
        assert (await call(port, b"POST", rpc(1, "session/list", {}))).status == 400
        unknown = await call(port, b"POST", rpc(1, "session/list", {}), connection="nope")
        assert unknown.status == 404
        assert (await call(port, b"POST", b"x" * 2000)).status == 413
        assert (await call(port, b"POST", b"[]")).status == 400
        connection = await _initialize(port)
        again = await call(port, b"POST", init, connection=connection)
        assert again.status == 400
        async with events(port, "nope") as stream:
            assert stream.status == 404


@pytest.mark.anyio
async def test_a_connection_nobody_reads_is_ended() -> None:
    agent = Agent()
    async with listening(agent) as listener:
        assert listener.http is not None
        listener.http.limits = HttpLimits(detached_s=0.05)
        await _initialize(listener.port)
        (connection,) = listener.http.connections.values()
        await agent.ended.wait()  # no GET, no request: the handler's stream ended
        assert connection.ended == "detached"


@pytest.mark.anyio
async def test_requests_follow_each_other_on_one_connection() -> None:
    agent = Agent()
    async with listening(agent) as listener:
        stream = await anyio.connect_tcp("127.0.0.1", listener.port)
        async with stream:
            http = h11.Connection(h11.CLIENT)
            init = rpc(0, "initialize", {"protocolVersion": 1})
            opened = await call_on(stream, http, b"POST", init)
            assert opened.status == 200 and b"timeout=" in opened.headers[b"keep-alive"]
            connection = opened.headers[b"acp-connection-id"].decode()
            for method, body in ((b"POST", rpc(1, "session/new", {"cwd": "/"})), (b"DELETE", None)):
                http.start_next_cycle()
                answer = await call_on(stream, http, method, body, connection)
                assert answer.status == 202, answer
            await agent.ended.wait()


@pytest.fixture(scope="module")
def certificate_authority() -> trustme.CA:
    return trustme.CA()


@pytest.mark.anyio
async def test_streamable_http_over_tls(certificate_authority: trustme.CA, tmp_path: Path) -> None:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate_authority.issue_cert("127.0.0.1").configure_cert(server)
    ca_file = tmp_path / "ca.pem"
    certificate_authority.cert_pem.write_to_path(str(ca_file))
    listener = await WebSocketListener.open("127.0.0.1:0", token=TOKEN, ssl_context=server)
    agent = Agent()
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, agent)
        stream = await anyio.connect_tcp(
            "127.0.0.1",
            listener.port,
            ssl_context=client_ssl_context(ca_file),
            tls_standard_compatible=False,
        )
        async with stream:
            init = rpc(0, "initialize", {"protocolVersion": 1})
            opened = await call_on(stream, h11.Connection(h11.CLIENT), b"POST", init)
            assert opened.status == 200 and b"acp-connection-id" in opened.headers
        tg.cancel_scope.cancel()
    await listener.aclose()


@pytest.mark.anyio
async def test_the_host_waits_while_its_messages_wait_for_readers() -> None:
    connection = HttpConnection("c", HttpLimits(max_outbox_bytes=100))
    update = _line({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}})
    sent = anyio.Event()

    async def write_many() -> None:
        await connection.send(update * 3)  # more than 100 bytes: the third waits for room
        sent.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(write_many)
        await anyio.wait_all_tasks_blocked()
        assert not sent.is_set() and connection.routing.buffered_bytes >= 100
        assert connection.routing.take("s") is not None  # an SSE reader took one
        connection.changed.notify_all()
        await sent.wait()
    assert len(connection.routing.sessions["s"].lines) == 2
    connection.end("deleted")
    with pytest.raises(anyio.BrokenResourceError):
        await connection.send(update)
    with pytest.raises(anyio.EndOfStream):
        await connection.receive()


@pytest.mark.anyio
async def test_an_initialize_the_host_does_not_answer_is_503() -> None:
    async def refuse(stream: ByteStream) -> None:
        await stream.aclose()  # as the host past --max-clients

    listener = await WebSocketListener.open("127.0.0.1:0", token=TOKEN)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, refuse)
        answer = await call(listener.port, b"POST", rpc(0, "initialize", {"protocolVersion": 1}))
        assert answer.status == 503, answer
        tg.cancel_scope.cancel()
    await listener.aclose()
