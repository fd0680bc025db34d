"""The recording's line format, for both its writer (:mod:`.recorder`) and its reader
(:mod:`.script`, :mod:`.replay`). Pure.

Every line of a recording is one JSON object, compact, UTF-8, ended by ``\\n``::

    {"t": <unix time>, "dir": <direction>, "msg": <the message>}
    {"t": <unix time>, "dir": <direction>, "raw": <the line as text>}     (not JSON)
    {"t": <unix time>, "dir": "bridge", "event": {"event": <name>, ...}}

"JSON" here is strict: UTF-8, no ``NaN``/``Infinity`` (nor a number too large for a double),
nesting at most :data:`MAX_DEPTH` deep. A message that is JSON is embedded byte for byte (less
any ``\\r``, which valid JSON can only hold as insignificant whitespace); anything else (a
line cut by a dying writer, a log line on stdout, bad UTF-8) is kept as text under ``raw``, its
first :data:`RAW_KEEP_CHARS` characters, with ``rawBytes`` giving the whole line's length when
it was cut. So every line stays a whole JSON object whatever crossed the pipes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from acp_bridge.proxy.redact import redact, redact_text

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DIRECTIONS",
    "MAX_DEPTH",
    "RAW_KEEP_CHARS",
    "NotJsonError",
    "entry_line",
    "event_line",
    "loads_strict",
    "raw_line",
    "stopped_line",
]

DIRECTIONS = ("editor->bridge", "bridge->agent", "agent->bridge", "bridge->editor")

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""The default cap of a recording file (``proxy --record-max-bytes``), and what ``replay``
reads of one by default (``replay --max-bytes``)."""

MAX_DEPTH = 200
"""Deepest nesting of objects and arrays accepted as JSON (an ACP message needs perhaps 10;
Python's decoder gives up somewhere under 1,000, depending on the stack already in use)."""

RAW_KEEP_CHARS = 1024 * 1024
"""How much of a non-JSON line is kept under ``raw``: enough to debug with, and a recording
line stays far below what :mod:`.replay` reads."""


class NotJsonError(ValueError):
    """A line that is not strict JSON; the message says why."""


def _no_constant(name: str) -> Any:
    raise NotJsonError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJsonError(f"{text} does not fit a double")
    return value


def _depth_over_max(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def loads_strict(line: bytes | str) -> Any:
    """The JSON value of ``line``.

    Raises:
        NotJsonError: not UTF-8, not JSON, a non-JSON number, or nested over :data:`MAX_DEPTH`.
    """
    try:
        text = line.decode("utf-8") if isinstance(line, bytes) else line
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise NotJsonError(f"nested deeper than {MAX_DEPTH} levels") from None
    except NotJsonError:
        raise
    except UnicodeDecodeError:
        raise NotJsonError("not UTF-8") from None
    except ValueError as exc:
        raise NotJsonError(str(exc)) from None
    # Counting brackets costs next to nothing; only a line with many walks the value.
    brackets = text.count("[") + text.count("{")
    if brackets > MAX_DEPTH and isinstance(value, dict | list) and _depth_over_max(value):
        raise NotJsonError(f"nested deeper than {MAX_DEPTH} levels")
    return value


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _head(t: float, direction: str) -> bytes:
    return b'{"t":' + repr(t).encode() + b',"dir":' + _dumps(direction)


def entry_line(t: float, direction: str, line: bytes, *, redact_secrets: bool) -> bytes:
    """The recording line (with its ``\\n``) of one message that crossed a pipe."""
    try:
        value = loads_strict(line)
    except NotJsonError:
        return raw_line(t, direction, line, redact_secrets=redact_secrets)
    if redact_secrets:
        body = _dumps(redact(value))
    else:
        body = line.replace(b"\r", b"") if b"\r" in line else line
    return b"".join((_head(t, direction), b',"msg":', body, b"}\n"))


def raw_line(t: float, direction: str, line: bytes, *, redact_secrets: bool) -> bytes:
    """The recording line of a line that crossed a pipe but is not JSON."""
    text = line.decode("utf-8", errors="replace")
    field = b',"raw":'
    if len(text) > RAW_KEEP_CHARS:
        field = b',"rawBytes":' + str(len(line)).encode() + field
        text = text[:RAW_KEEP_CHARS]
    raw = _dumps(redact_text(text) if redact_secrets else text)
    return b"".join((_head(t, direction), field, raw, b"}\n"))


def event_line(t: float, event: dict[str, Any]) -> bytes:
    """The recording line of one of the bridge's own events (an agent exit, a restart)."""
    return _head(t, "bridge") + b',"event":' + _dumps(event) + b"}\n"


def stopped_line(t: float, reason: str, detail: str) -> bytes:
    """The recording's last line when the recorder stops before the proxy does."""
    return event_line(t, {"event": "recording_stopped", "reason": reason, "detail": detail})
