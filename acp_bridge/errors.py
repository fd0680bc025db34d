"""The one exception tree of acp-bridge.

Everything acp-bridge raises on purpose derives from :class:`BridgeError`. Foreign exceptions
(OSError, anyio stream errors, pydantic ValidationError) are translated once, at the edge of the
layer that met them, with ``raise ... from exc`` so the cause stays visible.

Two distinctions follow trio's naming and matter to callers:

* :class:`LocalProtocolError` means *we* were about to break the protocol (a bug on our side);
  :class:`RemoteProtocolError` means the peer did.
* :class:`ConnectionClosedError` means the peer went away (broken); :class:`ResourceClosedError`
  means the object was used after *we* closed it.

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "AgentError",
    "AgentExitedError",
    "AgentStartupError",
    "AlreadyRunningError",
    "AuthRequiredError",
    "BridgeError",
    "ConfigMismatchError",
    "ConnectionClosedError",
    "ErrorCode",
    "FramingError",
    "LocalProtocolError",
    "ProtocolError",
    "ProtocolVersionError",
    "QueueStoreError",
    "RemoteProtocolError",
    "ResourceClosedError",
    "RestartLimitError",
    "RpcError",
    "SessionRestoreError",
    "SpawnError",
    "StoreReplacedError",
    "UnknownConversationError",
    "UnknownMessageError",
    "UnsafeFileError",
]


class ErrorCode:
    """JSON-RPC 2.0 and ACP error codes (acp-protocol.md section 8)."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    REQUEST_CANCELLED = -32800
    AUTH_REQUIRED = -32000
    RESOURCE_NOT_FOUND = -32002


class BridgeError(Exception):
    """Root of every exception acp-bridge raises on purpose."""


class ProtocolError(BridgeError):
    """The JSON-RPC or ACP rules were broken, by one side or the other."""


class FramingError(ProtocolError):
    """A line could not be turned into a message: over the size cap, not UTF-8, or not JSON.

    ``fatal`` is true when the byte stream can no longer be trusted (an over-long line leaves us
    mid-line with no way to resynchronise); the connection must then be treated as broken.
    """

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class LocalProtocolError(ProtocolError):
    """We were about to send something illegal. This is a bug in acp-bridge or its caller."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something illegal."""


DATA_SHOWN_CHARS = 500
"""How much of an error's ``data`` its description shows (an agent may put a whole traceback
there)."""


def describe_rpc_error(code: int, message: str, data: Any = None) -> str:
    """A JSON-RPC error for a person: the peer's message, its code, and its ``data`` when it has
    any, since agents often answer a generic "Internal error" and put the reason in ``data``
    (as the ACP SDKs' ``internal_error(data)`` do). A string shows as is, anything else as
    compact JSON; past :data:`DATA_SHOWN_CHARS` it is cut with an ellipsis."""
    text = f"{message} ({code})"
    if data is None or data == "" or data == {} or data == []:
        return text
    shown = (
        data
        if isinstance(data, str)
        else json.dumps(data, ensure_ascii=False, default=repr, separators=(",", ":"))
    )
    shown = " ".join(shown.split())  # one line, whatever the agent put in
    if len(shown) > DATA_SHOWN_CHARS:
        shown = shown[: DATA_SHOWN_CHARS - 1] + "\u2026"
    return f"{text}: {shown}"


class RpcError(BridgeError):
    """A JSON-RPC error response, received from the peer or about to be sent to it.

    Handlers raise it to answer with an error; :meth:`JsonRpcPeer.request` raises it when the
    peer answered with one. Use the named constructors for the codes ACP defines.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(describe_rpc_error(code, message, data))
        self.code = code
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"RpcError(code={self.code}, message={self.message!r}, data={self.data!r})"

    def to_wire(self) -> dict[str, Any]:
        """The ``error`` member of a JSON-RPC response."""
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            wire["data"] = self.data
        return wire

    @classmethod
    def from_wire(cls, error: Any) -> RpcError:
        """Build from a response's ``error`` member, tolerating a malformed one."""
        if not isinstance(error, dict):
            return cls(ErrorCode.INTERNAL_ERROR, "malformed error object", error)
        code = error.get("code")
        message = error.get("message")
        if not isinstance(code, int) or isinstance(code, bool):
            code = ErrorCode.INTERNAL_ERROR
        return cls(
            code,
            message if isinstance(message, str) else "error without a message",
            error.get("data"),
        )

    @classmethod
    def parse_error(cls, data: Any = None) -> RpcError:
        return cls(ErrorCode.PARSE_ERROR, "Parse error", data)

    @classmethod
    def invalid_request(cls, data: Any = None) -> RpcError:
        return cls(ErrorCode.INVALID_REQUEST, "Invalid request", data)

    @classmethod
    def method_not_found(cls, method: str) -> RpcError:
        return cls(ErrorCode.METHOD_NOT_FOUND, "Method not found", {"method": method})

    @classmethod
    def invalid_params(cls, data: Any = None) -> RpcError:
        return cls(ErrorCode.INVALID_PARAMS, "Invalid params", data)

    @classmethod
    def internal_error(cls, data: Any = None) -> RpcError:
        return cls(ErrorCode.INTERNAL_ERROR, "Internal error", data)

    @classmethod
    def request_cancelled(cls, data: Any = None) -> RpcError:
        return cls(ErrorCode.REQUEST_CANCELLED, "Request cancelled", data)

    @classmethod
    def auth_required(cls, data: Any = None) -> RpcError:
        return cls(ErrorCode.AUTH_REQUIRED, "Authentication required", data)

    @classmethod
    def resource_not_found(cls, uri: str | None = None) -> RpcError:
        return cls(
            ErrorCode.RESOURCE_NOT_FOUND,
            "Resource not found",
            {"uri": uri} if uri is not None else None,
        )


class ConnectionClosedError(BridgeError):
    """The peer went away (EOF, broken pipe, a fatal framing error) while we needed it."""


class ResourceClosedError(BridgeError):
    """The object was used after we closed it ourselves."""


class AgentError(BridgeError):
    """Something went wrong with an agent process."""


class SpawnError(AgentError):
    """The agent could not be started; ``__cause__`` holds the OSError."""


class AgentStartupError(AgentError):
    """The agent started but could not be initialized (it died, hung, or answered wrongly)."""


class ProtocolVersionError(AgentStartupError):
    """The agent speaks an ACP version we do not."""

    def __init__(self, message: str, *, agent_version: int) -> None:
        super().__init__(message)
        self.agent_version = agent_version


class AuthRequiredError(AgentError):
    """The agent answered -32000: ``authenticate`` with one of ``methods`` first.

    ``methods`` holds ``(id, name, description)`` for each auth method the agent listed;
    ``agent_message`` is the error message the agent itself sent. No retry can succeed until
    the user authenticates, so a turn failed by it is not recoverable.
    """

    def __init__(
        self, message: str, *, methods: list[tuple[str, str, str]], agent_message: str = ""
    ) -> None:
        super().__init__(message)
        self.methods = methods
        self.agent_message = agent_message


class AgentExitedError(AgentError):
    """The agent process exited (or stopped answering) while we needed it.

    ``recoverable`` is true when the supervisor is restarting the agent and will restore its
    sessions, so the caller may go on (the lost work is not re-sent by itself).
    """

    def __init__(
        self,
        message: str,
        *,
        returncode: int | None = None,
        signal: int | None = None,
        stderr_tail: str = "",
        recoverable: bool = False,
    ) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.signal = signal
        self.stderr_tail = stderr_tail
        self.recoverable = recoverable


class SessionRestoreError(AgentError):
    """A session could not be restored on a restarted agent."""


class RestartLimitError(AgentError):
    """The restart policy gave up; ``history`` lists the exits that led there."""

    def __init__(self, message: str, *, history: list[Any] | None = None) -> None:
        super().__init__(message)
        self.history = list(history or [])


class QueueStoreError(BridgeError):
    """The durable queue is unreadable or corrupt."""


class UnknownConversationError(QueueStoreError):
    """No conversation with this id is stored."""

    def __init__(self, path: str, conversation_id: str) -> None:
        super().__init__(f"{path}: no conversation {conversation_id!r}")
        self.conversation_id = conversation_id


class UnknownMessageError(QueueStoreError):
    """The conversation has no message with this seq."""

    def __init__(self, path: str, conversation_id: str, seq: int) -> None:
        super().__init__(f"{path}: conversation {conversation_id!r} has no message {seq}")
        self.conversation_id = conversation_id
        self.seq = seq


class AlreadyRunningError(QueueStoreError):
    """Another message of the conversation is still running (a caller bug: finish it first)."""

    def __init__(self, path: str, conversation_id: str, running_seq: int) -> None:
        super().__init__(
            f"{path}: conversation {conversation_id!r} is still running message {running_seq}; "
            "finish it (or recover_after_crash) before starting another"
        )
        self.conversation_id = conversation_id
        self.running_seq = running_seq


class StoreReplacedError(QueueStoreError):
    """The store's file was deleted, moved away or replaced while this process had it open:
    what it commits would no longer be in the store at its path, so it commits nothing more."""


class UnsafeFileError(BridgeError):
    """A file or directory acp-bridge was given is not one it may use: a symbolic link, a FIFO
    or device where a regular file belongs, or something another user owns or can write. It
    was refused before anything was read from it or written to it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ConfigMismatchError(BridgeError):
    """A stored conversation cannot continue with the current configuration (another cwd, or
    an MCP server its history used was removed)."""

    recoverable = False
