"""Client → agent session requests: the params of session/new|load|resume|list|close|delete|
set_mode|set_config_option, session/prompt and the session/cancel notification, and the MCP
server entries they carry.

acp-protocol.md section 4. The bridge originates these when it restores a session after a
restart (it stores ``cwd``, ``mcpServers`` and ``additionalDirectories`` itself) and when it
dequeues a prompt; it sends them as plain dicts, so a client run never defines these models
(see :mod:`acp_bridge.wire.acp`, which holds the results and re-exports these names).
"""

from typing import Annotated, Any, Literal, Self

from pydantic import StrictBool, Tag

from acp_bridge.wire.base import (
    SKIP_INVALID,
    UNKNOWN_TAG,
    WireModel,
    tag_discriminator,
)
from acp_bridge.wire.content import ContentBlock

__all__ = [
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


# --- session setup ------------------------------------------------------------------------------


class NewSessionRequest(WireModel):
    """``session/new`` params: ``{cwd, mcpServers, additionalDirectories?}``."""

    cwd: str
    mcp_servers: _McpServers
    additional_directories: Annotated[list[str] | None, SKIP_INVALID] = None


class LoadSessionRequest(WireModel):
    """``session/load`` params; gated by ``loadSession``. The agent replays the whole history."""

    session_id: str
    cwd: str
    mcp_servers: _McpServers
    additional_directories: Annotated[list[str] | None, SKIP_INVALID] = None


class ResumeSessionRequest(WireModel):
    """``session/resume`` params; gated by ``sessionCapabilities.resume``. No replay."""

    session_id: str
    cwd: str
    mcp_servers: _McpServers | None = None
    additional_directories: Annotated[list[str] | None, SKIP_INVALID] = None


class ListSessionsRequest(WireModel):
    """``session/list`` params: ``{cwd?, cursor?}``."""

    cwd: str | None = None
    cursor: str | None = None


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


# --- prompt turn --------------------------------------------------------------------------------


class PromptRequest(WireModel):
    """``session/prompt`` params; one request spans the whole turn in v1."""

    session_id: str
    prompt: list[ContentBlock]


class CancelNotification(WireModel):
    """``session/cancel`` params (a notification): cancel the session's running turn."""

    session_id: str
