"""JSON-RPC 2.0 envelopes: decode a line, classify it, encode a message. Pure; no I/O.

The envelope is checked by hand rather than through pydantic on purpose: it is on the hot path
(every ``session/update`` passes here, budget 50,000 messages/s on two cores) and an invalid
envelope must be answered -32600 *with the id we could read*, which a failed union validation
does not give us. The payloads the bridge inspects are validated with the pydantic models in
:mod:`acp_bridge.wire.acp` and friends, by the code that handles them.

Decisions, for input the spec leaves open (each has a test):

* A line that is not UTF-8, or not JSON, is a parse error (-32700, id null). So is a line that
  breaks the decoder in other ways: nesting deeper than the stdlib decoder's recursion allows
  (about 2 KB of ``[``), or an integer of more than ``sys.int_max_str_digits`` (4,300) digits.
  Whatever an agent writes is at worst a protocol error from that agent, never a crash of ours.
* Decoding: :func:`pydantic_core.from_json` first (about 4x faster than :mod:`json` on a
  ``session/update`` line); a line it refuses is decoded again by :mod:`json`, which therefore
  decides what is accepted. So the accepted set is exactly what ``json.loads`` accepts (and the
  values are the same: big integers, floats, ``NaN``/``Infinity``, last duplicate key wins),
  including legal nesting deeper than ``from_json``'s limit of 200 levels.
* A lone surrogate escape (``"\\ud800"``) is accepted, as ``json.loads`` does: JavaScript agents
  emit one when they cut a string inside a surrogate pair (``JSON.stringify`` escapes it), and
  refusing would drop a whole update or prompt answer. :func:`encode_message` writes such a
  string back as the same ``\\uXXXX`` escape, so what we send stays valid UTF-8.
* A JSON value that is neither an object nor an array is an invalid request (-32600, id null).
* A batch array is unpacked and each element handled as if it had come on its own line; replies
  go out one per line. ACP v1 never sends batches and v2 allows them, so this is the behaviour
  that keeps a v2 peer working. An empty batch is -32600.
* An object with a ``method`` is a request when it has an ``id`` member (``null`` included, as
  ACP allows) and a notification otherwise.
* An object without ``method`` but with ``result`` or ``error`` is a response. Responses are
  never answered, whatever is wrong with them, so two peers cannot loop on each other's errors.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import from_json

from acp_bridge.errors import FramingError, LocalProtocolError, RpcError
from acp_bridge.record import record

__all__ = [
    "JSONRPC_VERSION",
    "BadMessage",
    "Message",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "classify",
    "decode_line",
    "encode_message",
    "error_response",
    "notification",
    "request",
    "success_response",
]

JSONRPC_VERSION = "2.0"

RequestId = int | str | None
"""A request id: an integer, a string, or null (ACP allows all three)."""

_decoder = json.JSONDecoder()
_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ascii_encoder = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


@record
class Request:
    """An incoming call that expects exactly one response."""

    id: RequestId
    method: str
    params: Any


@record
class Notification:
    """An incoming message that must never be answered."""

    method: str
    params: Any


@record
class Response:
    """An answer to one of our requests: ``error`` is set for an error response."""

    id: RequestId
    result: Any
    error: RpcError | None

    @property
    def is_error(self) -> bool:
        return self.error is not None


@record
class BadMessage:
    """Something that is not a valid message.

    ``reply`` is the error to send back, or None when nothing may be sent (a malformed response:
    answering responses risks an endless error ping-pong). ``id`` is what we could read of it.
    """

    id: RequestId
    error: RpcError
    reply: bool


Message = Request | Notification | Response | BadMessage


def decode_line(line: bytes) -> Any:
    """Turn one line (without its newline) into a JSON value.

    Raises:
        FramingError: the line is not UTF-8, not JSON, or JSON this decoder cannot hold (too
            deep, an integer with too many digits). Nothing else escapes.
    """
    try:
        return from_json(line)
    except ValueError:
        pass  # refused: the stdlib decides, and says why
    return _decode_with_stdlib(line)


def _decode_with_stdlib(line: bytes) -> Any:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FramingError(f"line is not valid UTF-8: {exc.reason} at byte {exc.start}") from exc
    try:
        return _decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise FramingError(f"line is not JSON: {exc.msg} at column {exc.colno}") from exc
    except RecursionError as exc:
        raise FramingError("line is not JSON we accept: nested too deeply") from exc
    except ValueError as exc:  # int_max_str_digits, and any other value the decoder refuses
        raise FramingError(f"line is not JSON we accept: {str(exc)[:80]}") from exc


def _is_valid_id(value: Any) -> bool:
    # bool is an int subclass, and true/false are not ids.
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )


def classify(value: Any) -> Message:
    """Classify one decoded JSON value (not a batch: callers unpack arrays first)."""
    if type(value) is not dict:
        return BadMessage(None, RpcError.invalid_request("message is not a JSON object"), True)
    method = value.get("method")
    if method is None and "result" in value and "error" not in value:
        # The common answer, taken without the general checks below (it ends a turn: every
        # call on the way to the caller counts). ``type() is`` keeps booleans out of ids.
        raw_id = value.get("id")
        if type(raw_id) is int or type(raw_id) is str:
            return Response(raw_id, value["result"], None)
    raw_id = value.get("id")
    msg_id = raw_id if _is_valid_id(raw_id) else None
    if method is not None:
        return _classify_call(value, method, msg_id)
    if "result" in value or "error" in value:
        return _classify_response(value, msg_id)
    return BadMessage(
        msg_id, RpcError.invalid_request("neither a request, a notification nor a response"), True
    )


def _classify_call(value: dict[str, Any], method: Any, msg_id: RequestId) -> Message:
    has_id = "id" in value
    problem = None
    if value.get("jsonrpc") != JSONRPC_VERSION:
        problem = 'jsonrpc must be "2.0"'
    elif not isinstance(method, str):
        problem = "method must be a string"
    elif has_id and not _is_valid_id(value["id"]):
        problem = "id must be an integer, a string or null"
    elif "result" in value or "error" in value:
        problem = "a request cannot carry result or error"
    else:
        params = value.get("params")
        if params is not None and type(params) not in (dict, list):
            problem = "params must be an object or an array"
        elif has_id:
            return Request(msg_id, method, params)
        else:
            return Notification(method, params)
    # A broken notification gets no reply: the sender expects none and has no id to match.
    return BadMessage(msg_id, RpcError.invalid_request(problem), has_id)


def _classify_response(value: dict[str, Any], msg_id: RequestId) -> Message:
    if "id" not in value or not _is_valid_id(value["id"]):
        return BadMessage(msg_id, RpcError.invalid_request("response without a valid id"), False)
    if "result" in value and "error" in value:
        return BadMessage(msg_id, RpcError.invalid_request("response has result and error"), False)
    if "error" in value:
        return Response(msg_id, None, RpcError.from_wire(value["error"]))
    return Response(msg_id, value["result"], None)


def encode_message(message: dict[str, Any]) -> bytes:
    """Serialize compactly as one UTF-8 line, newline included.

    json escapes every control character inside strings, so the result never holds an embedded
    newline. A string holding a lone surrogate (which UTF-8 cannot carry) is written with
    ``\\uXXXX`` escapes instead, the form it arrived in.

    Raises:
        LocalProtocolError: the message is not JSON-serializable (NaN, sets, objects...).
    """
    try:
        text = _encoder.encode(message)
    except (TypeError, ValueError, RecursionError) as exc:
        raise LocalProtocolError(f"message is not JSON-serializable: {exc}") from exc
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (_ascii_encoder.encode(message) + "\n").encode("ascii")


def request(msg_id: RequestId, method: str, params: Any = None) -> dict[str, Any]:
    """A request object. ``params`` may be a dict, a list, or None (left out).

    Raises:
        LocalProtocolError: ``params`` is some other type.
    """
    message: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "id": msg_id, "method": method}
    if params is not None:
        message["params"] = _checked_params(method, params)
    return message


def notification(method: str, params: Any = None) -> dict[str, Any]:
    """A notification object; ``params`` as for :func:`request`."""
    message: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "method": method}
    if params is not None:
        message["params"] = _checked_params(method, params)
    return message


def _checked_params(method: str, params: Any) -> Any:
    if type(params) is not dict and type(params) is not list:
        raise LocalProtocolError(
            f"params of {method} must be an object or an array, not {type(params).__name__}"
        )
    return params


def success_response(msg_id: RequestId, result: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": msg_id, "result": result}


def error_response(msg_id: RequestId, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": msg_id, "error": error.to_wire()}
