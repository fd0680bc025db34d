"""ACP over WebSocket through real TCP (and TLS) connections, on both anyio backends: the
server's handshake rules, the line adapter both ways, and its bounds."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
import pytest
import trustme
from anyio.abc import ByteStream
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Event, Ping, Pong, Request, TextMessage

from acp_bridge.host.websocket import (
    WebSocketLimits,
    WebSocketRejectedError,
    WebSocketStream,
    client_ssl_context,
    connect_websocket,
    serve_websocket,
)
from acp_bridge.rpc.framing import LineReader

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-tests"


@dataclass
class Echo:
    """A handler that sends back every byte it reads, and records how each connection ended."""

    endings: list[str] = field(default_factory=list)
    connected: int = 0
    entered: anyio.Event = field(default_factory=anyio.Event)
    ended: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, stream: WebSocketStream) -> None:
        self.connected += 1
        self.entered.set()
        try:
            async for chunk in stream:
                await stream.send(chunk)
        except anyio.BrokenResourceError:
            self.endings.append(f"broken {stream.close_code}")
        except anyio.ClosedResourceError:
            self.endings.append(f"closed by the server {stream.close_code}")
        else:
            self.endings.append(f"end of stream {stream.close_code}")
        self.ended.set()


@asynccontextmanager
async def serving(
    handler: Callable[[WebSocketStream], Awaitable[None]],
    *,
    ssl_context: ssl.SSLContext | None = None,
    limits: WebSocketLimits | None = None,
) -> AsyncIterator[int]:
    """The server on a free loopback port (yielded) until the block ends."""
    serve = partial(
        serve_websocket,
        "127.0.0.1:0",
        handler,
        token=TOKEN,
        ssl_context=ssl_context,
        limits=limits or WebSocketLimits(),
    )
    async with anyio.create_task_group() as tg:
        port: int = await tg.start(serve)
        yield port
        tg.cancel_scope.cancel()


class RawClient:
    """A WebSocket client that sends whatever frames a test builds (wsproto by hand)."""

    def __init__(self, stream: ByteStream, websocket: WSConnection) -> None:
        self.stream = stream
        self.websocket = websocket

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        stream = await anyio.connect_tcp("127.0.0.1", port)
        websocket = WSConnection(ConnectionType.CLIENT)
        headers = [(b"authorization", f"Bearer {TOKEN}".encode())]
        await stream.send(websocket.send(Request(host="x", target="/acp", extra_headers=headers)))
        client = cls(stream, websocket)
        assert isinstance(await client.next_event(), AcceptConnection)
        return client

    async def send(self, event: Event) -> None:
        await self.stream.send(self.websocket.send(event))

    async def next_event(self) -> Event:
        while True:
            for event in self.websocket.events():
                return event
            self.websocket.receive_data(await self.stream.receive())


async def _raw_http(port: int, request: bytes) -> bytes:
    """What the server answers ``request`` with, until it closes the connection."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        answer = b""
        try:
            while True:
                answer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return answer


def _url(port: int, path: str = "/acp", scheme: str = "ws", host: str = "127.0.0.1") -> str:
    return f"{scheme}://{host}:{port}{path}"


async def test_many_lines_and_a_1_mib_line_round_trip_through_an_echo_handler() -> None:
    echo = Echo()
    lines = [b'{"jsonrpc":"2.0","method":"n","params":{"n":%d}}' % n for n in range(3000)]
    lines.insert(1500, b'{"big":"' + b"\xc3\xa9" * (512 * 1024) + b'"}')  # 1 MiB + a bit, UTF-8
    async with serving(echo) as port:
        client = await connect_websocket(_url(port), token=TOKEN)
        reader = LineReader(client)

        async def send_all() -> None:
            for line in lines:
                await client.send(line + b"\n")

        async with anyio.create_task_group() as tg:
            tg.start_soon(send_all)
            for line in lines:
                assert await reader.receive_line() == line
        await client.aclose()
        assert client.close_code == 1000
        await echo.ended.wait()  # the handler sees the close as the end of its stream
    assert echo.endings == ["end of stream 1000"]


async def test_bytes_written_in_any_pieces_arrive_as_whole_lines() -> None:
    async with serving(Echo()) as port, await connect_websocket(_url(port), token=TOKEN) as client:
        reader = LineReader(client)
        await client.send(b'{"a":')  # an unfinished line: the first fragment of its message
        await client.send(b'1}\n{"b":2}\n{"c"')
        await client.send(b":3}\n")
        assert [await reader.receive_line() for _ in range(3)] == [
            b'{"a":1}',
            b'{"b":2}',
            b'{"c":3}',
        ]


async def test_a_fragmented_message_is_reassembled_into_one_line() -> None:
    async with serving(Echo()) as port:
        raw = await RawClient.connect(port)
        frames = b"".join(
            raw.websocket.send(TextMessage(data=part, message_finished=last))
            for part, last in [('{"text":', False), ('"split in', False), (' three"}', True)]
        )
        for index in range(0, len(frames), 5):  # and the frames cut across TCP writes
            await raw.stream.send(frames[index : index + 5])
        echoed = ""  # the echo handler sends pieces as it reads them: fragments again
        while True:
            event = await raw.next_event()
            assert isinstance(event, TextMessage)
            echoed += event.data
            if event.message_finished:
                break
        assert echoed == '{"text":"split in three"}'
        await raw.stream.aclose()


async def test_a_ping_is_answered_with_a_pong() -> None:
    async with serving(Echo()) as port:
        raw = await RawClient.connect(port)
        await raw.send(Ping(payload=b"still there?"))
        pong = await raw.next_event()
        assert isinstance(pong, Pong) and pong.payload == b"still there?"
        await raw.stream.aclose()


@pytest.mark.parametrize(
    ("token", "reason"),
    [(None, "missing bearer token"), ("not-the-token", "wrong bearer token")],
    ids=["missing", "wrong"],
)
async def test_a_missing_or_wrong_token_is_refused_with_401_and_never_reaches_the_handler(
    token: str | None, reason: str
) -> None:
    echo = Echo()
    async with serving(echo) as port:
        with pytest.raises(WebSocketRejectedError) as caught:
            await connect_websocket(_url(port), token=token)
        assert caught.value.status == 401 and caught.value.reason.startswith(reason)
        assert f"401 {reason}" in str(caught.value)
        # The server goes on: the right token gets in.
        async with await connect_websocket(_url(port), token=TOKEN):
            await echo.entered.wait()
    assert echo.connected == 1


async def test_another_path_is_404_and_a_plain_request_426() -> None:
    echo = Echo()
    async with serving(echo) as port:
        with pytest.raises(WebSocketRejectedError) as caught:
            await connect_websocket(_url(port, "/other"), token=TOKEN)
        assert caught.value.status == 404 and "/acp" in caught.value.reason
        answer = await _raw_http(port, b"GET /acp HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 426 ") and b"upgrade: websocket" in answer.lower()
        answer = await _raw_http(port, b"NONSENSE\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 ")
        http_1_0 = (  # HTTP/1.0 needs no Host, a WebSocket upgrade does
            b"GET /acp HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n"
        )
        answer = await _raw_http(port, http_1_0)
        assert answer.startswith(b"HTTP/1.1 400 ") and b"Host" in answer
        endless = b"GET /acp HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 20_000  # and no end
        answer = await _raw_http(port, endless)  # an unfinished head is read to 16 KiB, no more
        assert answer.startswith(b"HTTP/1.1 400 ")
    assert echo.connected == 0


async def test_a_message_over_the_bound_closes_the_connection_with_1009() -> None:
    echo = Echo()
    limits = WebSocketLimits(max_message_bytes=4096)
    async with serving(echo, limits=limits) as port:
        client = await connect_websocket(_url(port), token=TOKEN)
        await client.send(b"{}\n")
        assert await client.receive() == b"{}\n"  # under the bound: fine
        await client.send(b'"' + b"x" * 8192 + b'"\n')
        with pytest.raises(anyio.BrokenResourceError):
            await client.receive()
        assert client.close_code == 1009 and "4096" in client.close_reason
        await client.aclose()
        await echo.ended.wait()
    assert echo.endings == ["broken 1009"]


async def test_a_message_holding_a_newline_closes_the_connection_with_1007() -> None:
    async with serving(Echo()) as port:
        raw = await RawClient.connect(port)
        await raw.send(TextMessage(data='{"a":1}\n{"b":2}'))
        closing = await raw.next_event()
        await raw.stream.aclose()
        assert getattr(closing, "code", None) == 1007


async def test_the_handler_ending_closes_the_websocket_cleanly() -> None:
    async def greet(stream: WebSocketStream) -> None:
        await stream.send(b'{"hello":true}\n')

    async with serving(greet) as port, await connect_websocket(_url(port), token=TOKEN) as client:
        assert await client.receive() == b'{"hello":true}\n'
        with pytest.raises(anyio.EndOfStream):
            await client.receive()
        assert client.close_code == 1000


async def test_past_max_connections_the_next_connection_waits_for_a_free_slot() -> None:
    echo = Echo()
    async with serving(echo, limits=WebSocketLimits(max_connections=1)) as port:
        first = await connect_websocket(_url(port), token=TOKEN)
        await echo.entered.wait()
        connected = anyio.Event()
        second: list[WebSocketStream] = []

        async def connect_second() -> None:
            second.append(await connect_websocket(_url(port), token=TOKEN))
            connected.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(connect_second)
            await anyio.wait_all_tasks_blocked()  # the second waits on its socket for a 101
            assert echo.connected == 1 and not connected.is_set()
            await first.aclose()
            await connected.wait()
        await second[0].send(b"{}\n")
        assert await second[0].receive() == b"{}\n"
        assert echo.connected == 2
        await second[0].aclose()


async def test_a_client_that_never_finishes_its_handshake_is_dropped_and_frees_its_slot() -> None:
    echo = Echo()
    limits = WebSocketLimits(max_connections=1, handshake_timeout_s=0.2)
    async with serving(echo, limits=limits) as port:
        async with await anyio.connect_tcp("127.0.0.1", port) as silent:
            await silent.send(b"GET /acp HTTP/1.1\r\n")  # and never the rest
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                await silent.receive()  # the server hung up, without an answer
        async with await connect_websocket(_url(port), token=TOKEN) as client:
            await client.send(b"{}\n")
            assert await client.receive() == b"{}\n"
    assert echo.connected == 1


async def test_a_peer_that_answers_no_ping_is_closed_with_1011() -> None:
    echo = Echo()
    async with serving(echo, limits=WebSocketLimits(ping_interval_s=0.1)) as port:
        raw = await RawClient.connect(port)  # and it never reads again
        await echo.ended.wait()
        await raw.stream.aclose()
    assert echo.endings == ["closed by the server 1011"]


async def test_a_peer_that_answers_pings_stays_connected() -> None:
    echo = Echo()
    async with serving(echo, limits=WebSocketLimits(ping_interval_s=0.3)) as port:
        raw = await RawClient.connect(port)
        answered = 0
        while answered < 3:  # the server pings whenever it heard nothing for 0.3 s
            event = await raw.next_event()
            assert isinstance(event, Ping), event
            await raw.send(event.response())
            answered += 1
        await raw.send(TextMessage(data="{}"))
        echoed = await raw.next_event()
        while isinstance(echoed, Ping):  # one more may come first
            await raw.send(echoed.response())
            echoed = await raw.next_event()
        assert isinstance(echoed, TextMessage) and echoed.data == "{}"
        await raw.stream.aclose()


async def test_a_failing_handler_is_logged_and_the_server_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    async def fail_first(stream: WebSocketStream) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        await stream.send(b"{}\n")

    with caplog.at_level(logging.ERROR, logger="acp_bridge.host.websocket"):
        async with serving(fail_first) as port:
            async with await connect_websocket(_url(port), token=TOKEN) as client:
                with pytest.raises(anyio.EndOfStream):
                    await client.receive()
            async with await connect_websocket(_url(port), token=TOKEN) as client:
                assert await client.receive() == b"{}\n"
    assert "handler of a WebSocket connection failed" in caplog.text


# --- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate_authority() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    return context


async def test_wss_with_a_trusted_certificate_round_trips_lines(
    certificate_authority: trustme.CA, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.pem"
    certificate_authority.cert_pem.write_to_path(str(ca_file))
    client_context = client_ssl_context(ca_file)  # trusts that CA only
    async with serving(Echo(), ssl_context=_server_context(certificate_authority)) as port:
        url = _url(port, scheme="wss", host="localhost")
        async with await connect_websocket(url, token=TOKEN, ssl_context=client_context) as ws:
            await ws.send(b'{"over":"tls"}\n')
            assert await ws.receive() == b'{"over":"tls"}\n'
        with pytest.raises(WebSocketRejectedError) as caught:  # the token is still checked
            await connect_websocket(url, token="wrong", ssl_context=client_context)
        assert caught.value.status == 401


async def test_wss_refuses_a_certificate_it_does_not_trust_and_plain_ws_gets_nothing(
    certificate_authority: trustme.CA,
) -> None:
    echo = Echo()
    async with serving(echo, ssl_context=_server_context(certificate_authority)) as port:
        with pytest.raises(ssl.SSLError):  # the system's trust store does not know our CA
            await connect_websocket(_url(port, scheme="wss", host="localhost"), token=TOKEN)
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
            await connect_websocket(_url(port), token=TOKEN)  # no TLS to a TLS port
    assert echo.connected == 0
