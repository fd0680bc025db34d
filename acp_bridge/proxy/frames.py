"""What the relay reads of one line: kind, id, method, session id, stop reason. Pure.

The relay forwards the line's bytes, never a re-serialization, so a message the bridge does
not change reaches the other side byte for byte. Parsing is only for routing. A
``session/update`` notification written in the usual key order (``{"jsonrpc":"2.0",
"method":"session/update",...``, as our fixtures and both official SDKs write it) is
recognised by its prefix and not parsed at all: it is the bulk of a turn's traffic, and the
relay needs nothing from it but its kind.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "UPDATE_PREFIXES",
    "Frame",
    "FrameKind",
    "IdKey",
    "id_key",
    "parse_line",
    "with_id",
]

IdKey = str
"""A JSON-RPC id as a dictionary key: its type and value (``1``, ``1.0``, ``"1"`` differ)."""

UPDATE_PREFIXES = (
    b'{"jsonrpc":"2.0","method":"session/update",',
    b'{"jsonrpc": "2.0", "method": "session/update", ',
)


class FrameKind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"
    BATCH = "batch"
    """A JSON array: forwarded as it is, never routed (ACP v1 has no batches)."""
    INVALID = "invalid"
    """Not JSON, not UTF-8, or a JSON value that is neither an object nor an array."""


@dataclass(frozen=True, slots=True)
class Frame:
    line: bytes
    """The line as read, without its newline: what gets forwarded."""
    kind: FrameKind
    message: dict[str, Any] | None = None
    """The parsed object; None on the fast path and for batches and invalid lines."""
    method: str | None = None

    @property
    def id(self) -> Any:
        return None if self.message is None else self.message.get("id")

    @property
    def key(self) -> IdKey:
        return id_key(self.id)

    @property
    def params(self) -> dict[str, Any]:
        params = None if self.message is None else self.message.get("params")
        return params if isinstance(params, dict) else {}

    @property
    def session_id(self) -> str | None:
        value = self.params.get("sessionId")
        return value if isinstance(value, str) else None

    @property
    def result(self) -> Any:
        return None if self.message is None else self.message.get("result")

    @property
    def is_error(self) -> bool:
        return self.message is not None and "error" in self.message

    @property
    def error(self) -> dict[str, Any]:
        error = None if self.message is None else self.message.get("error")
        return error if isinstance(error, dict) else {}

    @property
    def stop_reason(self) -> str | None:
        result = self.result
        reason = result.get("stopReason") if isinstance(result, dict) else None
        return reason if isinstance(reason, str) else None


def with_id(frame: Frame, new_id: Any) -> bytes:
    """``frame``'s line with its id replaced by ``new_id``, every other byte as it came. The
    id member is found in the line's bytes (exactly one ``"id":<the id>`` must match); a line
    where that is ambiguous is re-serialized instead."""
    assert frame.message is not None
    old = json.dumps(frame.message.get("id"), ensure_ascii=False).encode()
    pattern = re.compile(rb'"id"(\s*):(\s*)' + re.escape(old) + rb"(?=\s*[,}])")
    new = json.dumps(new_id, ensure_ascii=False).encode()
    found = pattern.findall(frame.line)
    if len(found) == 1:
        return pattern.sub(lambda m: b'"id"' + m[1] + b":" + m[2] + new, frame.line)
    message = {**frame.message, "id": new_id}
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def id_key(value: Any) -> IdKey:
    return f"{type(value).__name__}:{value!r}"


def parse_line(line: bytes, *, by_prefix: bool = True) -> Frame:
    """Classify one line. Never raises: a line the decoder chokes on (bad UTF-8, deep
    nesting, a number too long to convert) is INVALID. ``by_prefix=False`` parses even a line
    that starts like a ``session/update`` (one cut short by a dying writer)."""
    if by_prefix and line.startswith(UPDATE_PREFIXES):
        return Frame(line, FrameKind.NOTIFICATION, method="session/update")
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return Frame(line, FrameKind.INVALID)
    if isinstance(value, list):
        return Frame(line, FrameKind.BATCH)
    if not isinstance(value, dict):
        return Frame(line, FrameKind.INVALID)
    method = value.get("method")
    if isinstance(method, str):
        kind = FrameKind.REQUEST if "id" in value else FrameKind.NOTIFICATION
        return Frame(line, kind, value, method)
    if "id" in value and ("result" in value or "error" in value):
        return Frame(line, FrameKind.RESPONSE, value)
    return Frame(line, FrameKind.INVALID, value)
