"""Client → agent session methods: session/new|load|resume|list|close|delete|set_mode|
set_config_option, session/prompt and the session/cancel notification.

acp-protocol.md section 4. The bridge originates these when it restores a session after a
restart (it stores ``cwd``, ``mcpServers`` and ``additionalDirectories`` itself) and when it
dequeues a prompt, and it inspects their results (``sessionId``, ``stopReason``, ``usage``).

This module defines the results, which a client validates. The request params (and the MCP
server entries) live in :mod:`acp_bridge.wire.session_requests`, defined on first use: a client
sends them as plain dicts, and a one-shot run should not pay for defining them. They are still
importable from here (``from acp_bridge.wire.acp import NewSessionRequest``).
"""

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, StrictBool, Tag

from acp_bridge.wire.base import (
    SALVAGE,
    SKIP_INVALID,
    UNKNOWN_TAG,
    NullableResult,
    WireModel,
    tag_discriminator,
)

if TYPE_CHECKING:
    from acp_bridge.wire.session_requests import (
        CancelNotification,
        CloseSessionRequest,
        DeleteSessionRequest,
        EnvVariable,
        HttpHeader,
        ListSessionsRequest,
        LoadSessionRequest,
        McpServer,
        McpServerHttp,
        McpServerSse,
        McpServerStdio,
        NewSessionRequest,
        PromptRequest,
        ResumeSessionRequest,
        SetSessionConfigOptionRequest,
        SetSessionModeRequest,
    )

# Defined in wire/session_requests.py, imported from there on first access (see __getattr__).
_REQUEST_NAMES = [
    "CancelNotification",
    "CloseSessionRequest",
    "DeleteSessionRequest",
    "EnvVariable",
    "HttpHeader",
    "ListSessionsRequest",
    "LoadSessionRequest",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "NewSessionRequest",
    "PromptRequest",
    "ResumeSessionRequest",
    "SetSessionConfigOptionRequest",
    "SetSessionModeRequest",
]
_REQUESTS = frozenset(_REQUEST_NAMES)

__all__ = [
    "BooleanConfigOption",
    "ConfigOption",
    "ListSessionsResponse",
    "LoadSessionResponse",
    "NewSessionResponse",
    "PromptAnswer",
    "PromptResponse",
    "ResumeSessionResponse",
    "SelectConfigOption",
    "SessionInfo",
    "SessionMode",
    "SessionModeState",
    "SetSessionConfigOptionResponse",
    "StopReason",
    "UnknownConfigOption",
    "Usage",
]
__all__ += _REQUEST_NAMES


def __getattr__(name: str) -> Any:
    """The request names, from :mod:`acp_bridge.wire.session_requests` on first access (then
    bound here, so this runs once per name)."""
    if name not in _REQUESTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from acp_bridge.wire import session_requests

    value = getattr(session_requests, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | _REQUESTS)


__all__ = [
    "BooleanConfigOption",
    "CancelNotification",
    "CloseSessionRequest",
    "ConfigOption",
    "DeleteSessionRequest",
    "EnvVariable",
    "HttpHeader",
    "ListSessionsRequest",
    "ListSessionsResponse",
    "LoadSessionRequest",
    "LoadSessionResponse",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "NewSessionRequest",
    "NewSessionResponse",
    "PromptRequest",
    "PromptResponse",
    "ResumeSessionRequest",
    "ResumeSessionResponse",
    "SelectConfigOption",
    "SessionInfo",
    "SessionMode",
    "SessionModeState",
    "SetSessionConfigOptionRequest",
    "SetSessionConfigOptionResponse",
    "SetSessionModeRequest",
    "StopReason",
    "UnknownConfigOption",
    "Usage",
]


# --- modes and config options -------------------------------------------------------------------


class SessionMode(WireModel):
    """``{id, name, description?}``."""

    id: str
    name: str
    description: Annotated[str | None, SALVAGE] = None


class SessionModeState(WireModel):
    """``modes`` in session results: ``{currentModeId, availableModes[]}`` (legacy; prefer
    config options with ``category:"mode"``)."""

    current_mode_id: str
    available_modes: Annotated[list[SessionMode], SKIP_INVALID]


class SelectConfigOption(WireModel):
    """``{type:"select", id, name, currentValue, options, category?, description?}``.

    ``options`` is flat (``[{value, name}]``) or grouped (``[{group, name, options}]``); the
    bridge only stores and relays it, so it stays raw.
    """

    type: Literal["select"] = "select"
    id: str
    name: str
    current_value: str
    options: list[dict[str, Any]]
    category: Annotated[str | None, SALVAGE] = None
    description: Annotated[str | None, SALVAGE] = None


class BooleanConfigOption(WireModel):
    """``{type:"boolean", id, name, currentValue: bool}``; only if the client advertised it."""

    type: Literal["boolean"] = "boolean"
    id: str
    name: str
    current_value: StrictBool
    category: Annotated[str | None, SALVAGE] = None
    description: Annotated[str | None, SALVAGE] = None


class UnknownConfigOption(WireModel):
    """A config option of a type this version does not know; kept whole, to be ignored."""

    type: str
    id: str


ConfigOption = Annotated[
    Annotated[SelectConfigOption, Tag("select")]
    | Annotated[BooleanConfigOption, Tag("boolean")]
    | Annotated[UnknownConfigOption, Tag(UNKNOWN_TAG)],
    tag_discriminator("type", "type", ("select", "boolean")),
]

_ConfigOptions = Annotated[list[ConfigOption], SKIP_INVALID]


# --- session setup ------------------------------------------------------------------------------


class NewSessionResponse(WireModel):
    """``session/new`` result: ``{sessionId, modes?, configOptions?}``."""

    session_id: str
    modes: Annotated[SessionModeState | None, SALVAGE] = None
    config_options: Annotated[_ConfigOptions | None, SALVAGE] = None


class LoadSessionResponse(NullableResult):
    """``session/load`` result: ``{modes?, configOptions?}``, or ``null``."""

    modes: Annotated[SessionModeState | None, SALVAGE] = None
    config_options: Annotated[_ConfigOptions | None, SALVAGE] = None


class ResumeSessionResponse(NullableResult):
    """``session/resume`` result: ``{modes?, configOptions?}``."""

    modes: Annotated[SessionModeState | None, SALVAGE] = None
    config_options: Annotated[_ConfigOptions | None, SALVAGE] = None


class SessionInfo(WireModel):
    """One ``session/list`` entry."""

    session_id: str
    cwd: str
    additional_directories: Annotated[list[str] | None, SKIP_INVALID] = None
    title: Annotated[str | None, SALVAGE] = None
    updated_at: Annotated[str | None, SALVAGE] = None


class ListSessionsResponse(WireModel):
    """``session/list`` result; a missing ``nextCursor`` means the last page."""

    sessions: Annotated[list[SessionInfo], SKIP_INVALID]
    next_cursor: Annotated[str | None, SALVAGE] = None


class SetSessionConfigOptionResponse(WireModel):
    """``session/set_config_option`` result: the **complete** option list."""

    config_options: _ConfigOptions


# --- prompt turn --------------------------------------------------------------------------------


class StopReason(StrEnum):
    """Why a prompt turn ended (v1). Unknown strings are kept as plain ``str``."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    MAX_TURN_REQUESTS = "max_turn_requests"
    REFUSAL = "refusal"
    CANCELLED = "cancelled"


class Usage(WireModel):
    """Token usage of a turn (*unstable* ``PromptResponse.usage``)."""

    total_tokens: int
    input_tokens: int
    output_tokens: int
    thought_tokens: Annotated[int | None, SALVAGE] = None
    cached_read_tokens: Annotated[int | None, SALVAGE] = None
    cached_write_tokens: Annotated[int | None, SALVAGE] = None


class PromptResponse(WireModel):
    """``session/prompt`` result: ``{stopReason, usage?}``."""

    stop_reason: Annotated[StopReason | str, Field(union_mode="left_to_right")]
    usage: Annotated[Usage | None, SALVAGE] = None

    def is_cancelled(self) -> bool:
        return self.stop_reason == StopReason.CANCELLED


class PromptAnswer:
    """A ``session/prompt`` result as read from the wire: its stop reason at once, the whole
    :class:`PromptResponse` on first use.

    Ending a turn needs only the stop reason, and a result whose ``stopReason`` is a string
    always validates (every other field salvages a bad value, and unknown fields are kept), so
    the model is built only when someone reads :attr:`response`. That keeps pydantic off the
    path from the agent's answer to the caller waking (about 35 us of the 0.2 ms it takes on a
    cold cache, docs/benchmarks.md), and off it entirely for callers who never look.
    """

    __slots__ = ("_raw", "_response", "stop_reason")

    def __init__(
        self, stop_reason: str, raw: dict[str, Any] | None, response: PromptResponse | None
    ) -> None:
        """Use :meth:`read` or :meth:`of`."""
        self.stop_reason = stop_reason
        self._raw = raw
        self._response = response

    @classmethod
    def read(cls, raw: Any) -> "PromptAnswer":
        """The answer a decoded JSON-RPC result gives.

        Raises:
            ValueError: not a valid ``session/prompt`` result (a pydantic ValidationError).
        """
        if type(raw) is dict:
            stop_reason = raw.get("stopReason")
            if type(stop_reason) is str:
                return cls(stop_reason, raw, None)
        response = PromptResponse.parse(raw)  # raises, saying what is wrong
        return cls.of(response)

    @classmethod
    def of(cls, response: PromptResponse) -> "PromptAnswer":
        return cls(str(response.stop_reason), None, response)

    @property
    def response(self) -> PromptResponse:
        """The validated result (built once)."""
        if self._response is None:
            self._response = PromptResponse.parse(self._raw)
            self._raw = None
        return self._response

    def is_cancelled(self) -> bool:
        return self.stop_reason == StopReason.CANCELLED

    def __repr__(self) -> str:
        return f"PromptAnswer(stop_reason={self.stop_reason!r})"
