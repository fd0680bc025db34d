"""The messages the proxy writes to the editor itself. Pure.

Error codes: -32600 for a request whose id is already in flight; -32603 for a request cut by
the agent's exit or refused because the agent is gone for good; -32002 (resource not found) for
a session that was lost in a restart; -32000..-32099 is ACP's range, so nothing here claims a
code with another meaning.
"""

from __future__ import annotations

import json
from typing import Any

from acp_bridge.process.policy import ExitRecord

__all__ = [
    "cancel_request",
    "cancelled_answer",
    "duplicate_id_error",
    "error_answer",
    "exit_error",
    "gone_error",
    "lost_session_error",
]

LOST_SESSION_CODE = -32002
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
_STDERR_LINES = 10


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def cancelled_answer(request_id: Any) -> bytes:
    return b'{"jsonrpc":"2.0","id":%s,"result":{"stopReason":"cancelled"}}' % _dumps(request_id)


def cancel_request(request_id: Any) -> bytes:
    return b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":%s}}' % _dumps(
        request_id
    )


def duplicate_id_error(request_id: Any) -> bytes:
    """The editor sent a request under an id that is still in flight: it is not forwarded (two
    answers with one id could not be told apart), and the earlier request is not touched."""
    message = (
        f"Invalid Request: id {json.dumps(request_id)} is already in flight; "
        "send each request under an id of its own"
    )
    return error_answer(request_id, INVALID_REQUEST, message, {"duplicateId": request_id})


def error_answer(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def _tail(record: ExitRecord) -> str:
    return "\n".join(record.stderr_tail.splitlines()[-_STDERR_LINES:])


def exit_error(
    request_id: Any,
    name: str,
    record: ExitRecord,
    *,
    restored: bool,
    why_not: str | None,
    has_session: bool = True,
) -> bytes:
    """The answer to a request the agent's exit cut short, once the restart is over."""
    if not has_session:
        after = "it was restarted; the request was not re-sent"
    elif restored:
        after = "it was restarted and the session was restored; the request was not re-sent"
    else:
        after = f"it was restarted but the session could not be restored ({why_not})"
    message = f"agent {name} ended during this request ({record.reason}); {after}"
    tail = _tail(record)
    if tail:
        message += f"\nLast stderr lines of the agent:\n{tail}"
    data = {
        "recoverable": restored,
        "sessionRestored": restored if has_session else None,
        "agentExit": {
            "reason": record.reason,
            "returncode": record.returncode,
            "signal": record.signal,
            "stderrTail": tail,
        },
    }
    return error_answer(request_id, INTERNAL_ERROR, message, data)


def lost_session_error(request_id: Any, session_id: str, why: str) -> bytes:
    message = f"session {session_id} was lost when the agent restarted: {why}. Start a new session."
    data = {"recoverable": False, "sessionId": session_id, "reason": why}
    return error_answer(request_id, LOST_SESSION_CODE, message, data)


def gone_error(request_id: Any, name: str, why: str) -> bytes:
    message = f"agent {name} is gone for good: {why}. Restart the agent from the editor."
    return error_answer(request_id, INTERNAL_ERROR, message, {"recoverable": False})
