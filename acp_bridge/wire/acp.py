"""Client → agent session methods: session/new|load|resume|list|close|delete|set_mode|
set_config_option, session/prompt and the session/cancel notification.

acp-protocol.md section 4. The bridge originates these when it restores a session after a
restart (it stores ``cwd``, ``mcpServers`` and ``additionalDirectories`` itself) and when it
dequeues a prompt, and it inspects their results (``sessionId``, ``stopReason``, ``usage``).
"""

from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import Field, StrictBool, Tag

from acp_bridge.wire.base import (
    SALVAGE,
    SKIP_INVALID,
    UNKNOWN_TAG,
    NullableResult,
    WireModel,
    tag_discriminator,
)
from acp_bridge.wire.content import ContentBlock

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


# --- MCP servers --------------------------------------------------------------------------------


class EnvVariable(WireModel):
    """``{name, value}``: one environment variable (MCP stdio servers, terminal/create)."""

    name: str
    value: str


class HttpHeader(WireModel):
    """``{name, value}``: one HTTP header of an http/sse MCP server."""

    name: str
    value: str


class McpServerStdio(WireModel):
    """A stdio MCP server (no ``type`` field): ``{name, command, args[], env[]}``."""

    name: str
    command: str
    args: list[str]
    env: list[EnvVariable]


class McpServerHttp(WireModel):
    """``{type:"http", name, url, headers[]}``; needs ``mcpCapabilities.http``."""

    type: Literal["http"] = "http"
    name: str
    url: str
    headers: list[HttpHeader]


class McpServerSse(WireModel):
    """``{type:"sse", name, url, headers[]}`` (deprecated); needs ``mcpCapabilities.sse``."""

    type: Literal["sse"] = "sse"
    name: str
    url: str
    headers: list[HttpHeader]


McpServer = Annotated[
    Annotated[McpServerStdio, Tag("stdio")]
    | Annotated[McpServerHttp, Tag("http")]
    | Annotated[McpServerSse, Tag("sse")]
    | Annotated[dict[str, Any], Tag(UNKNOWN_TAG)],
    tag_discriminator("type", "type", ("stdio", "http", "sse"), missing="stdio"),
]
"""An MCP server entry; unknown ``type`` values (e.g. unstable ``acp``) are kept as plain dicts."""

_McpServers = Annotated[list[McpServer], SKIP_INVALID]


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


class NewSessionRequest(WireModel):
    """``session/new`` params: ``{cwd, mcpServers, additionalDirectories?}``."""

    cwd: str
    mcp_servers: _McpServers
    additional_directories: Annotated[list[str] | None, SKIP_INVALID] = None


class NewSessionResponse(WireModel):
    """``session/new`` result: ``{sessionId, modes?, configOptions?}``."""

    session_id: str
    modes: Annotated[SessionModeState | None, SALVAGE] = None
    config_options: Annotated[_ConfigOptions | None, SALVAGE] = None


class LoadSessionRequest(WireModel):
    """``session/load`` params; gated by ``loadSession``. The agent replays the whole history."""

    session_id: str
    cwd: str
    mcp_servers: _McpServers
    additional_directories: Annotated[list[str] | None, SKIP_INVALID] = None


class LoadSessionResponse(NullableResult):
    """``session/load`` result: ``{modes?, configOptions?}``, or ``null``."""

    modes: Annotated[SessionModeState | None, SALVAGE] = None
    config_options: Annotated[_ConfigOptions | None, SALVAGE] = None


class ResumeSessionRequest(WireModel):
    """``session/resume`` params; gated by ``sessionCapabilities.resume``. No replay."""

    session_id: str
    cwd: str
    mcp_servers: _McpServers | None = None
    additional_directories: Annotated[list[str] | None, SKIP_INVALID] = None


class ResumeSessionResponse(NullableResult):
    """``session/resume`` result: ``{modes?, configOptions?}``."""

    modes: Annotated[SessionModeState | None, SALVAGE] = None
    config_options: Annotated[_ConfigOptions | None, SALVAGE] = None


class ListSessionsRequest(WireModel):
    """``session/list`` params: ``{cwd?, cursor?}``."""

    cwd: str | None = None
    cursor: str | None = None


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


class CloseSessionRequest(WireModel):
    """``session/close`` params (implies a cancel); the result is ``{}``."""

    session_id: str


class DeleteSessionRequest(WireModel):
    """``session/delete`` params; the result is ``{}``."""

    session_id: str


class SetSessionModeRequest(WireModel):
    """``session/set_mode`` params; the result is ``{}``."""

    session_id: str
    mode_id: str


class SetSessionConfigOptionRequest(WireModel):
    """``session/set_config_option`` params.

    A select option sends ``{sessionId, configId, value: "<value id>"}``; a boolean option adds
    ``type:"boolean"`` and sends ``value: true|false``. Use :meth:`select` / :meth:`boolean`.
    """

    session_id: str
    config_id: str
    type: Literal["boolean"] | None = None
    value: StrictBool | str

    @classmethod
    def select(cls, session_id: str, config_id: str, value: str) -> Self:
        return cls(session_id=session_id, config_id=config_id, value=value)

    @classmethod
    def boolean(cls, session_id: str, config_id: str, value: bool) -> Self:
        return cls(session_id=session_id, config_id=config_id, type="boolean", value=value)


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


class PromptRequest(WireModel):
    """``session/prompt`` params; one request spans the whole turn in v1."""

    session_id: str
    prompt: list[ContentBlock]


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


class CancelNotification(WireModel):
    """``session/cancel`` params (a notification): cancel the session's running turn."""

    session_id: str
