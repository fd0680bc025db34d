"""Envelope classification and encoding: pure functions, no I/O."""

from __future__ import annotations

import json
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
