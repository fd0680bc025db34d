"""Stable v1 method names (acp-protocol.md sections 3 to 5) -> the wire models of their params
and results.

Nothing in the bridge dispatches through these tables: handlers parse their own params model and
relayed traffic is never validated. They are the one list of which model answers for which method,
and the conformance tests (tests/conformance) hold every entry against golden samples and the
official SDK. Unstable and extension methods are deliberately absent; ``$/cancel_request``
belongs to the JSON-RPC layer.
"""

from __future__ import annotations

from typing import Final

from acp_bridge.wire.acp import (
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    ResumeSessionResponse,
    SetSessionConfigOptionResponse,
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
from acp_bridge.wire.session_requests import (
    CancelNotification,
    CloseSessionRequest,
    DeleteSessionRequest,
    ListSessionsRequest,
    LoadSessionRequest,
    NewSessionRequest,
    PromptRequest,
    ResumeSessionRequest,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
)
from acp_bridge.wire.updates import SessionNotification

__all__ = ["NOTIFICATION_PARAMS", "REQUEST_PARAMS", "RESULTS"]

REQUEST_PARAMS: Final[dict[str, type[WireModel]]] = {
    "initialize": InitializeRequest,
    "authenticate": AuthenticateRequest,
    "logout": EmptyResponse,  # params are {} as well
    "session/new": NewSessionRequest,
    "session/load": LoadSessionRequest,
    "session/resume": ResumeSessionRequest,
    "session/list": ListSessionsRequest,
    "session/close": CloseSessionRequest,
    "session/delete": DeleteSessionRequest,
    "session/set_mode": SetSessionModeRequest,
    "session/set_config_option": SetSessionConfigOptionRequest,
    "session/prompt": PromptRequest,
    "session/request_permission": RequestPermissionRequest,
    "fs/read_text_file": ReadTextFileRequest,
    "fs/write_text_file": WriteTextFileRequest,
    "terminal/create": CreateTerminalRequest,
    "terminal/output": TerminalOutputRequest,
    "terminal/wait_for_exit": WaitForTerminalExitRequest,
    "terminal/kill": KillTerminalRequest,
    "terminal/release": ReleaseTerminalRequest,
}
"""Request method -> params model."""

RESULTS: Final[dict[str, type[WireModel]]] = {
    "initialize": InitializeResponse,
    "authenticate": EmptyResponse,
    "logout": EmptyResponse,
    "session/new": NewSessionResponse,
    "session/load": LoadSessionResponse,
    "session/resume": ResumeSessionResponse,
    "session/list": ListSessionsResponse,
    "session/close": EmptyResponse,
    "session/delete": EmptyResponse,
    "session/set_mode": EmptyResponse,
    "session/set_config_option": SetSessionConfigOptionResponse,
    "session/prompt": PromptResponse,
    "session/request_permission": RequestPermissionResponse,
    "fs/read_text_file": ReadTextFileResponse,
    "fs/write_text_file": EmptyResponse,
    "terminal/create": CreateTerminalResponse,
    "terminal/output": TerminalOutputResponse,
    "terminal/wait_for_exit": WaitForTerminalExitResponse,
    "terminal/kill": EmptyResponse,
    "terminal/release": EmptyResponse,
}
"""Request method -> result model. ``EmptyResponse`` and the load/resume results accept ``null``."""

NOTIFICATION_PARAMS: Final[dict[str, type[WireModel]]] = {
    "session/cancel": CancelNotification,
    "session/update": SessionNotification,
}
"""Notification method -> params model. ``$/cancel_request`` belongs to the JSON-RPC layer."""
