"""Method names and the wire models of their params and results.

Handlers look their params model up here (``REQUEST_PARAMS[method].parse(params)``); methods
missing from the tables are relayed without validation. Unstable and extension methods are
deliberately absent.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from acp_bridge.wire.acp import (
    CancelNotification,
    CloseSessionRequest,
    DeleteSessionRequest,
    ListSessionsRequest,
    ListSessionsResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    NewSessionRequest,
    NewSessionResponse,
    PromptRequest,
    PromptResponse,
    ResumeSessionRequest,
    ResumeSessionResponse,
    SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse,
    SetSessionModeRequest,
)
from acp_bridge.wire.base import EmptyResponse, WireModel
from acp_bridge.wire.client_methods import (
    CreateTerminalRequest,
    CreateTerminalResponse,
    KillTerminalRequest,
    ReadTextFileRequest,
    ReadTextFileResponse,
    ReleaseTerminalRequest,
    RequestPermissionRequest,
    RequestPermissionResponse,
    TerminalOutputRequest,
    TerminalOutputResponse,
    WaitForTerminalExitRequest,
    WaitForTerminalExitResponse,
    WriteTextFileRequest,
)
from acp_bridge.wire.initialize import AuthenticateRequest, InitializeRequest, InitializeResponse
from acp_bridge.wire.updates import SessionNotification

__all__ = ["NOTIFICATION_PARAMS", "REQUEST_PARAMS", "RESULTS", "AcpMethod"]


class AcpMethod(StrEnum):
    """Stable v1 method names (acp-protocol.md sections 3 to 5)."""

    # client -> agent
    INITIALIZE = "initialize"
    AUTHENTICATE = "authenticate"
    LOGOUT = "logout"
    SESSION_NEW = "session/new"
    SESSION_LOAD = "session/load"
    SESSION_RESUME = "session/resume"
    SESSION_LIST = "session/list"
    SESSION_CLOSE = "session/close"
    SESSION_DELETE = "session/delete"
    SESSION_SET_MODE = "session/set_mode"
    SESSION_SET_CONFIG_OPTION = "session/set_config_option"
    SESSION_PROMPT = "session/prompt"
    SESSION_CANCEL = "session/cancel"
    # agent -> client
    SESSION_UPDATE = "session/update"
    SESSION_REQUEST_PERMISSION = "session/request_permission"
    FS_READ_TEXT_FILE = "fs/read_text_file"
    FS_WRITE_TEXT_FILE = "fs/write_text_file"
    TERMINAL_CREATE = "terminal/create"
    TERMINAL_OUTPUT = "terminal/output"
    TERMINAL_WAIT_FOR_EXIT = "terminal/wait_for_exit"
    TERMINAL_KILL = "terminal/kill"
    TERMINAL_RELEASE = "terminal/release"
    # either direction
    CANCEL_REQUEST = "$/cancel_request"


REQUEST_PARAMS: Final[dict[str, type[WireModel]]] = {
    AcpMethod.INITIALIZE: InitializeRequest,
    AcpMethod.AUTHENTICATE: AuthenticateRequest,
    AcpMethod.LOGOUT: EmptyResponse,  # params are {} as well
    AcpMethod.SESSION_NEW: NewSessionRequest,
    AcpMethod.SESSION_LOAD: LoadSessionRequest,
    AcpMethod.SESSION_RESUME: ResumeSessionRequest,
    AcpMethod.SESSION_LIST: ListSessionsRequest,
    AcpMethod.SESSION_CLOSE: CloseSessionRequest,
    AcpMethod.SESSION_DELETE: DeleteSessionRequest,
    AcpMethod.SESSION_SET_MODE: SetSessionModeRequest,
    AcpMethod.SESSION_SET_CONFIG_OPTION: SetSessionConfigOptionRequest,
    AcpMethod.SESSION_PROMPT: PromptRequest,
    AcpMethod.SESSION_REQUEST_PERMISSION: RequestPermissionRequest,
    AcpMethod.FS_READ_TEXT_FILE: ReadTextFileRequest,
    AcpMethod.FS_WRITE_TEXT_FILE: WriteTextFileRequest,
    AcpMethod.TERMINAL_CREATE: CreateTerminalRequest,
    AcpMethod.TERMINAL_OUTPUT: TerminalOutputRequest,
    AcpMethod.TERMINAL_WAIT_FOR_EXIT: WaitForTerminalExitRequest,
    AcpMethod.TERMINAL_KILL: KillTerminalRequest,
    AcpMethod.TERMINAL_RELEASE: ReleaseTerminalRequest,
}
"""Request method -> params model."""

RESULTS: Final[dict[str, type[WireModel]]] = {
    AcpMethod.INITIALIZE: InitializeResponse,
    AcpMethod.AUTHENTICATE: EmptyResponse,
    AcpMethod.LOGOUT: EmptyResponse,
    AcpMethod.SESSION_NEW: NewSessionResponse,
    AcpMethod.SESSION_LOAD: LoadSessionResponse,
    AcpMethod.SESSION_RESUME: ResumeSessionResponse,
    AcpMethod.SESSION_LIST: ListSessionsResponse,
    AcpMethod.SESSION_CLOSE: EmptyResponse,
    AcpMethod.SESSION_DELETE: EmptyResponse,
    AcpMethod.SESSION_SET_MODE: EmptyResponse,
    AcpMethod.SESSION_SET_CONFIG_OPTION: SetSessionConfigOptionResponse,
    AcpMethod.SESSION_PROMPT: PromptResponse,
    AcpMethod.SESSION_REQUEST_PERMISSION: RequestPermissionResponse,
    AcpMethod.FS_READ_TEXT_FILE: ReadTextFileResponse,
    AcpMethod.FS_WRITE_TEXT_FILE: EmptyResponse,
    AcpMethod.TERMINAL_CREATE: CreateTerminalResponse,
    AcpMethod.TERMINAL_OUTPUT: TerminalOutputResponse,
    AcpMethod.TERMINAL_WAIT_FOR_EXIT: WaitForTerminalExitResponse,
    AcpMethod.TERMINAL_KILL: EmptyResponse,
    AcpMethod.TERMINAL_RELEASE: EmptyResponse,
}
"""Request method -> result model. ``EmptyResponse`` and the load/resume results accept ``null``."""

NOTIFICATION_PARAMS: Final[dict[str, type[WireModel]]] = {
    AcpMethod.SESSION_CANCEL: CancelNotification,
    AcpMethod.SESSION_UPDATE: SessionNotification,
}
"""Notification method -> params model. ``$/cancel_request`` belongs to the JSON-RPC layer."""
