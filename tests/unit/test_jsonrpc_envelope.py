"""Envelope classification and encoding: pure functions, no I/O."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.errors import ErrorCode, FramingError, LocalProtocolError, RpcError
from acp_bridge.wire import jsonrpc
from acp_bridge.wire.jsonrpc import BadMessage, Notification, Request, Response


def test_a_message_with_method_and_id_is_a_request() -> None:
    msg = jsonrpc.classify({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {}})
    assert msg == Request(3, "session/prompt", {})


def test_a_null_id_still_makes_a_request() -> None:
    assert jsonrpc.classify({"jsonrpc": "2.0", "id": None, "method": "m"}) == Request(
        None, "m", None
    )


def test_a_message_with_method_and_no_id_is_a_notification() -> None:
    msg = jsonrpc.classify({"jsonrpc": "2.0", "method": "session/update", "params": {"a": 1}})
    assert msg == Notification("session/update", {"a": 1})


def test_results_and_errors_are_responses() -> None:
    assert jsonrpc.classify({"jsonrpc": "2.0", "id": "x", "result": None}) == Response(
        "x", None, None
    )
    error = jsonrpc.classify(
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "auth", "data": [1]}}
    )
    assert isinstance(error, Response)
    assert error.is_error
    assert error.error is not None
    assert (error.error.code, error.error.message, error.error.data) == (-32000, "auth", [1])


@pytest.mark.parametrize(
    ("value", "reply", "read_id"),
    [
        ([1], True, None),
        ("text", True, None),
        ({"jsonrpc": "2.0", "id": 1, "method": "m", "params": 3}, True, 1),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, True, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, True, None),
        ({"jsonrpc": "2.0", "method": "m", "params": 3}, False, None),
        ({"jsonrpc": "2.0", "id": 9}, True, 9),
        ({"jsonrpc": "2.0", "result": 1}, False, None),
        ({"jsonrpc": "2.0", "id": [1], "result": 1}, False, None),
        ({"jsonrpc": "2.0", "id": 2, "result": 1, "error": {}}, False, 2),
    ],
)
def test_invalid_messages_say_whether_to_reply_and_which_id(
    value: Any, reply: bool, read_id: Any
) -> None:
    msg = jsonrpc.classify(value)
    assert isinstance(msg, BadMessage)
    assert msg.error.code == ErrorCode.INVALID_REQUEST
    assert (msg.reply, msg.id) == (reply, read_id)


def test_decode_rejects_non_utf8_and_non_json() -> None:
    with pytest.raises(FramingError, match="UTF-8"):
        jsonrpc.decode_line(b"\xc3\x28")
    with pytest.raises(FramingError, match="not JSON"):
        jsonrpc.decode_line(b"{oops}")
    # UTF-16 would be auto-detected by json.loads(bytes); the wire is UTF-8 only.
    with pytest.raises(FramingError):
        jsonrpc.decode_line('{"a":1}'.encode("utf-16"))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(params=st.dictionaries(st.text(max_size=10), json_values, max_size=5), msg_id=st.integers())
def test_encoding_is_one_compact_line_that_decodes_back(
    params: dict[str, Any], msg_id: int
) -> None:
    line = jsonrpc.encode_message(jsonrpc.request(msg_id, "m", params))
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert jsonrpc.classify(jsonrpc.decode_line(line[:-1])) == Request(msg_id, "m", params)
    assert (
        line
        == (json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False) + "\n").encode()
    )


def test_encoding_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError):
        jsonrpc.encode_message({"x": float("inf")})
    with pytest.raises(LocalProtocolError):
        jsonrpc.encode_message({"x": object()})
    with pytest.raises(LocalProtocolError):
        jsonrpc.notification("m", "not params")


def test_error_responses_carry_the_wire_error() -> None:
    assert jsonrpc.error_response(4, RpcError.method_not_found("x")) == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": -32601, "message": "Method not found", "data": {"method": "x"}},
    }


@pytest.mark.parametrize(
    ("constructor", "code"),
    [
        (RpcError.parse_error, -32700),
        (RpcError.invalid_request, -32600),
        (RpcError.invalid_params, -32602),
        (RpcError.internal_error, -32603),
        (RpcError.request_cancelled, -32800),
        (RpcError.auth_required, -32000),
        (RpcError.resource_not_found, -32002),
    ],
)
def test_named_constructors_use_the_acp_codes(constructor: Any, code: int) -> None:
    error = constructor()
    assert error.code == code
    assert "data" not in error.to_wire()
    assert RpcError.from_wire(error.to_wire()).code == code


def test_from_wire_tolerates_malformed_errors() -> None:
    assert RpcError.from_wire("oops").code == ErrorCode.INTERNAL_ERROR
    odd = RpcError.from_wire({"code": True, "message": 5})
    assert (odd.code, odd.message) == (ErrorCode.INTERNAL_ERROR, "error without a message")


# -- decoding: hostile lines, and the same values as json.loads (issue 7, 8) ------------------

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "golden"


@pytest.mark.parametrize(
    "line",
    [
        b"[" * 2000 + b"]" * 2000,  # RecursionError in the stdlib decoder
        b'{"a":' * 2000 + b"1" + b"}" * 2000,
        b"[" * 2000,
        b'{"jsonrpc":"2.0","id":1,"result":' + b"7" * 4301 + b"}",  # int_max_str_digits
        b"-" + b"9" * 100_000,
    ],
    ids=["deep-arrays", "deep-objects", "deep-unclosed", "4301-digits", "100k-digits"],
)
def test_a_line_that_breaks_the_decoder_is_a_framing_error(line: bytes) -> None:
    """Before the fix these escaped as RecursionError / ValueError and ended the bridge."""
    with pytest.raises(FramingError, match="not JSON"):
        jsonrpc.decode_line(line)


def _stdlib(line: bytes) -> Any:
    return json.loads(line.decode("utf-8"))


@pytest.mark.parametrize(
    "line",
    [
        b"[" * 100 + b"]" * 100,
        b"[" * 500 + b"1" + b"]" * 500,  # legal, and deeper than from_json's 200 levels
        b'{"a":' * 300 + b"{}" + b"}" * 300,
        b"123456789012345678901234567890123456789",
        b"-" + b"9" * 4300,
        b"[1.7976931348623157e308,5e-324,1e400,-0.0,0.1,1E2,2.5e-3]",
        b"[NaN,Infinity,-Infinity]",
        b'{"a":1,"a":2}',
        b'"\\u0000\\u001f\\u2028\\ud83d\\ude00"',
        b' {"x" : [ 1 , 2 ] } ',
    ],
)
def test_decoding_gives_the_values_json_loads_gives(line: bytes) -> None:
    decoded = jsonrpc.decode_line(line)
    assert repr(decoded) == repr(_stdlib(line))  # repr: NaN != NaN, and -0.0 == 0.0


@pytest.mark.parametrize("text", ['"\\ud800"', '{"t":"cut \\ud83d"}', '"\\udc00\\ud800"'])
def test_a_lone_surrogate_is_accepted_and_encoded_back_as_an_escape(text: str) -> None:
    """Decision: accepted, as json.loads does (a JS agent cutting a string mid-pair sends this)."""
    value = jsonrpc.decode_line(text.encode())
    assert value == json.loads(text)
    line = jsonrpc.encode_message({"v": value})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.isascii()  # valid UTF-8 on the wire: the surrogate stays escaped
    assert json.loads(line) == {"v": value}


def golden_lines() -> list[Path]:
    files = sorted(GOLDEN_DIR.glob("*.json"))
    assert files
    return files


@pytest.mark.parametrize("path", golden_lines(), ids=lambda p: p.name)
def test_every_golden_acp_message_decodes_as_json_loads_decodes_it(path: Path) -> None:
    line = json.dumps(json.loads(path.read_bytes()), separators=(",", ":"), ensure_ascii=False)
    assert repr(jsonrpc.decode_line(line.encode())) == repr(json.loads(line))
    assert jsonrpc.decode_line(path.read_bytes()) == json.loads(path.read_bytes())


_JSONISH = '[]{}",:0123456789.eE+-tfrunalsINy\\u '


@given(st.binary(max_size=40) | st.text(alphabet=_JSONISH).map(str.encode))
def test_any_line_decodes_like_json_loads_or_is_a_framing_error(line: bytes) -> None:
    try:
        expected = ("ok", repr(_stdlib(line)))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
        expected = ("error", "")
    try:
        got = ("ok", repr(jsonrpc.decode_line(line)))
    except FramingError:
        got = ("error", "")
    assert got == expected
