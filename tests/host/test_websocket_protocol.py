"""ACP over WebSocket without I/O: lines <-> text messages between two wsproto connections in
memory (h11's ConnectionPair style), the upgrade rules, and the bind rule."""

from __future__ import annotations

import h11
import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, TextMessage
from wsproto.frame_protocol import CloseReason

from acp_bridge.errors import LocalProtocolError
from acp_bridge.host.ws_protocol import (
    Ending,
    LineFraming,
    ListenRefusedError,
    Received,
    check_bind,
    is_loopback,
    judge_upgrade,
    parse_listen,
)


class Pair:
    """A client and a server LineFraming, each side's bytes fed to the other by hand."""

    def __init__(self, max_message_bytes: int = 1024) -> None:
        self.client = LineFraming(
            Connection(ConnectionType.CLIENT), max_message_bytes=max_message_bytes
        )
        self.server = LineFraming(
            Connection(ConnectionType.SERVER), max_message_bytes=max_message_bytes
        )

    def to_server(self, data: bytes) -> Received:
        return self.server.receive_data(data)

    def to_client(self, data: bytes | bytearray) -> Received:
        return self.client.receive_data(bytes(data))


def _joined(received: Received) -> bytes:
    return b"".join(received.data)


def test_each_line_sent_arrives_as_one_message_followed_by_a_newline() -> None:
    pair = Pair()
    lines = b'{"jsonrpc":"2.0","id":1}\n{"a":"\xc3\xa9"}\n'
    received = pair.to_server(pair.client.frames_for(lines))
    assert _joined(received) == lines
    assert received.ending is None and not received.reply


def test_empty_lines_are_no_messages() -> None:
    pair = Pair()
    assert pair.client.frames_for(b"\n\n") == b""
    assert _joined(pair.to_server(pair.client.frames_for(b"\n{}\n\n"))) == b"{}\n"


def test_an_unfinished_line_is_sent_as_fragments_of_one_message() -> None:
    pair = Pair()
    first = pair.to_server(pair.client.frames_for(b'{"text":"\xc3'))  # half of an é
    assert b"\n" not in _joined(first)
    rest = pair.to_server(pair.client.frames_for(b'\xa9"}\n{}\n'))
    assert _joined(first) + _joined(rest) == b'{"text":"\xc3\xa9"}\n{}\n'


def test_frames_fed_one_byte_at_a_time_make_the_same_lines() -> None:
    pair = Pair(max_message_bytes=10_000)
    lines = b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * n * 40) for n in range(5))
    got = bytearray()
    for byte in pair.client.frames_for(lines):
        got += _joined(pair.to_server(bytes([byte])))
    assert got == lines


def test_a_ping_is_answered_with_a_pong_carrying_its_payload() -> None:
    pair = Pair()
    received = pair.to_server(pair.client.ping_frame(b"are you there"))
    assert received.reply and not received.data
    client_side = Connection(ConnectionType.CLIENT)
    client_side.receive_data(bytes(received.reply))
    (pong,) = list(client_side.events())
    assert pong.payload == b"are you there"  # type: ignore[attr-defined]


def test_the_close_handshake_ends_both_sides_cleanly() -> None:
    pair = Pair()
    received = pair.to_server(pair.client.close_frame())
    assert received.ending is Ending.CLOSED and pair.server.close_code == 1000
    answered = pair.to_client(received.reply)
    assert answered.ending is Ending.CLOSED
    assert pair.client.is_closed and pair.server.is_closed


@pytest.mark.parametrize(
    ("data", "code", "reason"),
    [
        (b"x" * 1025 + b"\n", CloseReason.MESSAGE_TOO_BIG, "longer than 1024 bytes"),
        (b'{"a":1}\n', CloseReason.INVALID_FRAME_PAYLOAD_DATA, "holds a newline"),
    ],
    ids=["over-the-bound", "newline-inside"],
)
def test_a_message_over_the_bound_or_holding_a_newline_closes_with_its_code(
    data: bytes, code: int, reason: str
) -> None:
    pair = Pair()
    client = Connection(ConnectionType.CLIENT)
    if code == CloseReason.INVALID_FRAME_PAYLOAD_DATA:
        frames = client.send(TextMessage(data='{"a":1}\n{"b":2}'))
    else:
        frames = pair.client.frames_for(data)
    received = pair.to_server(frames)
    assert received.ending is Ending.BROKEN
    assert pair.server.close_code == code and reason in pair.server.close_reason
    assert b"\n" not in _joined(received)  # no line was delivered whole
    assert pair.server.awaits_close_reply
    answered = pair.to_client(received.reply)
    assert pair.client.close_code == code
    assert answered.ending is Ending.BROKEN  # an error's close code: no end of stream
    final = pair.to_server(bytes(answered.reply))  # the client's answering close frame
    assert not final.reply and pair.server.is_closed and not pair.server.awaits_close_reply


def test_a_message_of_exactly_the_bound_is_taken() -> None:
    pair = Pair(max_message_bytes=100)
    received = pair.to_server(pair.client.frames_for(b"y" * 100 + b"\n"))
    assert _joined(received) == b"y" * 100 + b"\n" and received.ending is None


def test_a_binary_message_closes_with_1003() -> None:
    pair = Pair()
    received = pair.to_server(Connection(ConnectionType.CLIENT).send(BytesMessage(data=b"{}")))
    assert received.ending is Ending.BROKEN and pair.server.close_code == 1003


def test_a_close_in_the_middle_of_a_message_is_broken_not_an_end_of_stream() -> None:
    pair = Pair()
    pair.to_server(pair.client.frames_for(b'{"half":'))
    received = pair.to_server(pair.client.close_frame())
    assert received.ending is Ending.BROKEN


def test_a_lost_transport_is_broken() -> None:
    pair = Pair()
    assert pair.server.receive_data(None).ending is Ending.BROKEN


def test_malformed_frames_close_with_wsprotos_code_and_no_reply_is_awaited() -> None:
    pair = Pair()
    received = pair.to_server(b"\x81\x05hello")  # unmasked from a client: a protocol error
    assert received.ending is Ending.BROKEN and pair.server.close_code == 1002
    assert received.reply and not pair.server.awaits_close_reply


def test_nothing_more_is_sent_once_the_close_handshake_began() -> None:
    pair = Pair()
    pair.client.close_frame()
    with pytest.raises(LocalProtocolError, match="closing"):
        pair.client.frames_for(b"{}\n")


def test_bytes_to_send_that_are_not_utf8_are_our_bug() -> None:
    with pytest.raises(LocalProtocolError, match="not UTF-8"):
        Pair().client.frames_for(b"\xff\n")


# --- the upgrade request ------------------------------------------------------------------------


def _request(
    target: bytes = b"/acp", method: bytes = b"GET", **overrides: bytes | None
) -> h11.Request:
    headers = {
        b"host": b"example",
        b"upgrade": b"websocket",
        b"connection": b"keep-alive, Upgrade",
        b"sec-websocket-key": b"dGhlIHNhbXBsZSBub25jZQ==",
        b"sec-websocket-version": b"13",
        b"authorization": b"Bearer s3cret",
    }
    for name, value in overrides.items():
        key = name.replace("_", "-").encode()
        if value is None:
            headers.pop(key)
        else:
            headers[key] = value
    version = b"1.1" if b"host" in headers else b"1.0"  # h11 holds HTTP/1.1 to a Host
    return h11.Request(
        method=method, target=target, headers=list(headers.items()), http_version=version
    )


def test_an_upgrade_to_acp_with_the_right_token_is_accepted() -> None:
    assert judge_upgrade(_request(), path="/acp", token="s3cret") is None
    assert judge_upgrade(_request(b"/acp?x=1"), path="/acp", token="s3cret") is None
    lower = _request(authorization=b"bearer s3cret")
    assert judge_upgrade(lower, path="/acp", token="s3cret") is None


@pytest.mark.parametrize(
    ("request_", "status", "reason"),
    [
        (_request(b"/"), 404, "ACP is served at /acp"),
        (_request(b"/acp/x"), 404, "no such endpoint"),
        (_request(method=b"POST"), 405, "GET"),
        (_request(upgrade=None, connection=None), 426, "send an upgrade request"),
        (_request(upgrade=None), 400, "Upgrade: websocket"),
        (_request(sec_websocket_version=b"8"), 426, "version 13"),
        (_request(sec_websocket_key=None), 400, "Sec-WebSocket-Key"),
        (_request(host=None), 400, "no Host header"),
        (_request(authorization=None), 401, "missing bearer token"),
        (_request(authorization=b"Basic czNjcmV0"), 401, "not a bearer token"),
        (_request(authorization=b"Bearer wrong"), 401, "wrong bearer token"),
        (_request(authorization=b"Bearer s3cre"), 401, "wrong bearer token"),
    ],
)
def test_other_requests_are_refused_with_a_status_and_a_reason(
    request_: h11.Request, status: int, reason: str
) -> None:
    refusal = judge_upgrade(request_, path="/acp", token="s3cret")
    assert refusal is not None
    assert refusal.status == status and reason in refusal.reason
    response, body, _ = refusal.to_h11()
    assert response.status_code == status and body.data == refusal.reason.encode() + b"\n"
    if status == 401:
        assert (b"www-authenticate", b'Bearer realm="acp-bridge"') in response.headers


# --- --listen and the bind rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("localhost:0", ("localhost", 0)),
        ("0.0.0.0:443", ("0.0.0.0", 443)),
        ("[::1]:9000", ("::1", 9000)),
        ("example.org:80", ("example.org", 80)),
    ],
)
def test_listen_addresses_are_parsed(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["8765", ":8765", "host:", "host:http", "::1:80", "h:70000"])
def test_malformed_listen_addresses_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(ListenRefusedError, match=r"expected HOST:PORT, e\.g\."):
        parse_listen(text)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.1.2.3", "::1", "localhost", "LOCALHOST", "::ffff:127.0.0.1"]
)
def test_loopback_binds_need_no_tls(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, tls=False, insecure=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "example.org", ""])
def test_a_bind_beyond_loopback_needs_tls_or_insecure(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ListenRefusedError) as caught:
        check_bind(host, tls=False, insecure=False)
    message = str(caught.value)
    assert "\n" not in message
    assert all(flag in message for flag in ("--tls-cert", "--tls-key", "--insecure"))
    check_bind(host, tls=True, insecure=False)
    check_bind(host, tls=False, insecure=True)
