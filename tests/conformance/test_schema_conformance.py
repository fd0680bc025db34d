"""Our wire models against the official SDK's generated models (``acp.schema``) as the oracle.

Two directions:

* everything the bridge can *emit*, built with our models and dumped, must validate with the
  matching ``acp.schema`` model, and the SDK must read back exactly what we wrote;
* every golden sample in ``fixtures/golden`` (one JSON-RPC message per file, named
  ``<method with / as .>.<request|response|notification>[.<variant>].json``) must parse with our
  models and with ``acp.schema``, and our dump must equal the original JSON.

``acp.schema`` is generated from an older schema tag than acp-protocol.md describes, so a failure
here may be the SDK lagging the spec; check acp-protocol.md before "fixing" a model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("acp")

from acp import schema as sdk
from pydantic import BaseModel, TypeAdapter

from acp_bridge.wire.acp import (
    BooleanConfigOption,
    CancelNotification,
    CloseSessionRequest,
    EnvVariable,
    HttpHeader,
    ListSessionsRequest,
    ListSessionsResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    McpServerHttp,
    McpServerSse,
    McpServerStdio,
    NewSessionRequest,
    NewSessionResponse,
    PromptRequest,
    PromptResponse,
    ResumeSessionRequest,
    ResumeSessionResponse,
    SelectConfigOption,
    SessionInfo,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse,
    SetSessionModeRequest,
    StopReason,
    Usage,
)
from acp_bridge.wire.base import EmptyResponse, WireModel
from acp_bridge.wire.client_methods import (
    CreateTerminalResponse,
    ReadTextFileResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
)
from acp_bridge.wire.content import (
    AudioContent,
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from acp_bridge.wire.initialize import (
    AgentAuthMethod,
    AgentCapabilities,
    AuthCapabilities,
    AuthenticateRequest,
    Capability,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    PromptCapabilities,
    SessionCapabilities,
    TerminalAuthMethod,
)
from acp_bridge.wire.methods import NOTIFICATION_PARAMS, REQUEST_PARAMS, RESULTS
from acp_bridge.wire.updates import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AvailableCommand,
    AvailableCommandInput,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    ContentToolCallContent,
    Cost,
    CurrentModeUpdate,
    DiffToolCallContent,
    PlanEntry,
    PlanEntryPriority,
    PlanEntryStatus,
    PlanUpdate,
    SessionInfoUpdate,
    SessionNotification,
    TerminalToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    ToolKind,
    UsageUpdate,
    UserMessageChunk,
)

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "golden"
SESSION_ID = "sess_conformance"

_SET_CONFIG_OPTION: TypeAdapter[Any] = TypeAdapter(
    sdk.SetSessionConfigOptionBooleanRequest | sdk.SetSessionConfigOptionSelectRequest
)

SDK_PARAMS: dict[str, Any] = {
    "initialize": sdk.InitializeRequest,
    "authenticate": sdk.AuthenticateRequest,
    "logout": sdk.LogoutRequest,
    "session/new": sdk.NewSessionRequest,
    "session/load": sdk.LoadSessionRequest,
    "session/resume": sdk.ResumeSessionRequest,
    "session/list": sdk.ListSessionsRequest,
    "session/close": sdk.CloseSessionRequest,
    "session/delete": sdk.DeleteSessionRequest,
    "session/set_mode": sdk.SetSessionModeRequest,
    "session/set_config_option": _SET_CONFIG_OPTION,
    "session/prompt": sdk.PromptRequest,
    "session/cancel": sdk.CancelNotification,
    "session/update": sdk.SessionNotification,
    "session/request_permission": sdk.RequestPermissionRequest,
    "fs/read_text_file": sdk.ReadTextFileRequest,
    "fs/write_text_file": sdk.WriteTextFileRequest,
    "terminal/create": sdk.CreateTerminalRequest,
    "terminal/output": sdk.TerminalOutputRequest,
    "terminal/wait_for_exit": sdk.WaitForTerminalExitRequest,
    "terminal/kill": sdk.KillTerminalRequest,
    "terminal/release": sdk.ReleaseTerminalRequest,
}

SDK_RESULTS: dict[str, type[BaseModel]] = {
    "initialize": sdk.InitializeResponse,
    "authenticate": sdk.AuthenticateResponse,
    "logout": sdk.LogoutResponse,
    "session/new": sdk.NewSessionResponse,
    "session/load": sdk.LoadSessionResponse,
    "session/resume": sdk.ResumeSessionResponse,
    "session/list": sdk.ListSessionsResponse,
    "session/close": sdk.CloseSessionResponse,
    "session/delete": sdk.DeleteSessionResponse,
    "session/set_mode": sdk.SetSessionModeResponse,
    "session/set_config_option": sdk.SetSessionConfigOptionResponse,
    "session/prompt": sdk.PromptResponse,
    "session/request_permission": sdk.RequestPermissionResponse,
    "fs/read_text_file": sdk.ReadTextFileResponse,
    "fs/write_text_file": sdk.WriteTextFileResponse,
    "terminal/create": sdk.CreateTerminalResponse,
    "terminal/output": sdk.TerminalOutputResponse,
    "terminal/wait_for_exit": sdk.WaitForTerminalExitResponse,
    "terminal/kill": sdk.KillTerminalResponse,
    "terminal/release": sdk.ReleaseTerminalResponse,
}


def sdk_validate(oracle: Any, data: Any) -> BaseModel:
    """Validate ``data`` with an ``acp.schema`` model class or TypeAdapter."""
    if isinstance(oracle, TypeAdapter):
        result: BaseModel = oracle.validate_python(data)
        return result
    assert isinstance(oracle, type) and issubclass(oracle, BaseModel)
    return oracle.model_validate(data)


def sdk_dump(model: BaseModel) -> dict[str, Any]:
    """What the SDK would write for ``model``, with the same "only what was set" rule as ours."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


# --- direction 1: what we emit, the SDK accepts --------------------------------------------------

TEXT = TextContent(text="Why does the login test fail?")

EMITTED: list[tuple[str, WireModel, Any]] = [
    (
        "initialize params",
        InitializeRequest(
            protocol_version=1,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=False),
                terminal=True,
                auth=AuthCapabilities(terminal=True),
            ),
            client_info=Implementation(name="acp-bridge", title="ACP bridge", version="0.1.0"),
        ),
        sdk.InitializeRequest,
    ),
    ("minimal initialize params", InitializeRequest(protocol_version=1), sdk.InitializeRequest),
    ("authenticate params", AuthenticateRequest(method_id="claude-login"), sdk.AuthenticateRequest),
    (
        "session/new params",
        NewSessionRequest(
            cwd="/home/ada/project",
            mcp_servers=[
                McpServerStdio(
                    name="fs",
                    command="/usr/bin/mcp-fs",
                    args=["--root", "/home/ada"],
                    env=[EnvVariable(name="LOG", value="warn")],
                ),
                McpServerHttp(
                    name="gh",
                    url="https://example.com/mcp",
                    headers=[HttpHeader(name="Authorization", value="Bearer x")],
                ),
                McpServerSse(name="old", url="https://example.com/sse", headers=[]),
            ],
            additional_directories=["/home/ada/lib"],
        ),
        sdk.NewSessionRequest,
    ),
    (
        "session/load params",
        LoadSessionRequest(session_id=SESSION_ID, cwd="/home/ada/project", mcp_servers=[]),
        sdk.LoadSessionRequest,
    ),
    (
        "session/resume params",
        ResumeSessionRequest(session_id=SESSION_ID, cwd="/home/ada/project"),
        sdk.ResumeSessionRequest,
    ),
    (
        "initialize result",
        InitializeResponse(
            protocol_version=1,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=True, embedded_context=True),
                session_capabilities=SessionCapabilities(resume=Capability(), close=Capability()),
            ),
            auth_methods=[
                AgentAuthMethod(id="oauth", name="Log in"),
                TerminalAuthMethod(id="cli", name="Terminal login", args=["--login"]),
            ],
            agent_info=Implementation(name="acp-bridge", version="0.1.0"),
        ),
        sdk.InitializeResponse,
    ),
    (
        "session/new result",
        NewSessionResponse(
            session_id=SESSION_ID,
            modes=SessionModeState(
                current_mode_id="default",
                available_modes=[SessionMode(id="default", name="Default")],
            ),
            config_options=[
                SelectConfigOption(
                    id="model",
                    name="Model",
                    category="model",
                    current_value="opus",
                    options=[{"value": "opus", "name": "Opus"}],
                )
            ],
        ),
        sdk.NewSessionResponse,
    ),
    ("session/load result", LoadSessionResponse(), sdk.LoadSessionResponse),
    ("session/resume result", ResumeSessionResponse(), sdk.ResumeSessionResponse),
    ("session/list params", ListSessionsRequest(cwd="/home/ada/project"), sdk.ListSessionsRequest),
    (
        "session/list result",
        ListSessionsResponse(
            sessions=[SessionInfo(session_id=SESSION_ID, cwd="/home/ada/project", title="t")]
        ),
        sdk.ListSessionsResponse,
    ),
    (
        "session/set_config_option result",
        SetSessionConfigOptionResponse(
            config_options=[BooleanConfigOption(id="web", name="Web", current_value=False)]
        ),
        sdk.SetSessionConfigOptionResponse,
    ),
    ("authenticate result", EmptyResponse(), sdk.AuthenticateResponse),
    ("session/close params", CloseSessionRequest(session_id=SESSION_ID), sdk.CloseSessionRequest),
    (
        "session/set_mode params",
        SetSessionModeRequest(session_id=SESSION_ID, mode_id="plan"),
        sdk.SetSessionModeRequest,
    ),
    (
        "session/set_config_option select params",
        SetSessionConfigOptionRequest.select(SESSION_ID, "model", "opus"),
        sdk.SetSessionConfigOptionSelectRequest,
    ),
    (
        "session/set_config_option boolean params",
        SetSessionConfigOptionRequest.boolean(SESSION_ID, "web", True),
        sdk.SetSessionConfigOptionBooleanRequest,
    ),
    (
        "session/prompt params",
        PromptRequest(
            session_id=SESSION_ID,
            prompt=[
                TEXT,
                ResourceLink(uri="file:///home/ada/project/a.py", name="a.py", size=12),
                EmbeddedResource(
                    resource=TextResourceContents(
                        uri="file:///log", text="FAILED", mime_type="text/plain"
                    )
                ),
                EmbeddedResource(resource=BlobResourceContents(uri="file:///b", blob="AAEC")),
                ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                AudioContent(data="UklGRg==", mime_type="audio/wav"),
            ],
        ),
        sdk.PromptRequest,
    ),
    ("session/cancel params", CancelNotification(session_id=SESSION_ID), sdk.CancelNotification),
    (
        "prompt response",
        PromptResponse(
            stop_reason=StopReason.CANCELLED,
            usage=Usage(total_tokens=30, input_tokens=20, output_tokens=10),
        ),
        sdk.PromptResponse,
    ),
    (
        "permission selected",
        RequestPermissionResponse.selected("allow-once"),
        sdk.RequestPermissionResponse,
    ),
    ("permission cancelled", RequestPermissionResponse.cancelled(), sdk.RequestPermissionResponse),
    ("fs/read_text_file result", ReadTextFileResponse(content="x = 1\n"), sdk.ReadTextFileResponse),
    ("fs/write_text_file result", EmptyResponse(), sdk.WriteTextFileResponse),
    (
        "terminal/create result",
        CreateTerminalResponse(terminal_id="t1"),
        sdk.CreateTerminalResponse,
    ),
    (
        "terminal/output result",
        TerminalOutputResponse(
            output="ok\n", truncated=False, exit_status=TerminalExitStatus(exit_code=0)
        ),
        sdk.TerminalOutputResponse,
    ),
    (
        "terminal/wait_for_exit result",
        WaitForTerminalExitResponse(signal="SIGKILL"),
        sdk.WaitForTerminalExitResponse,
    ),
    ("terminal/kill result", EmptyResponse(), sdk.KillTerminalResponse),
    ("terminal/release result", EmptyResponse(), sdk.ReleaseTerminalResponse),
]

UPDATES: list[tuple[WireModel, type[BaseModel]]] = [
    (UserMessageChunk(content=TEXT, message_id="m1"), sdk.UserMessageChunk),
    (AgentMessageChunk(content=TextContent(text="Because")), sdk.AgentMessageChunk),
    (AgentThoughtChunk(content=TextContent(text="Hmm")), sdk.AgentThoughtChunk),
    (
        ToolCallStart(
            tool_call_id="c1",
            title="Read a.py",
            kind=ToolKind.READ,
            status=ToolCallStatus.PENDING,
            locations=[ToolCallLocation(path="/home/ada/a.py", line=3)],
            raw_input={"path": "a.py"},
        ),
        sdk.ToolCallStart,
    ),
    (
        ToolCallProgress(
            tool_call_id="c1",
            status=ToolCallStatus.FAILED,
            content=[
                ContentToolCallContent(content=TextContent(text="boom")),
                DiffToolCallContent(path="/home/ada/a.py", new_text="x = 2\n"),
                TerminalToolCallContent(terminal_id="t1"),
            ],
        ),
        sdk.ToolCallProgress,
    ),
    (
        PlanUpdate(
            entries=[
                PlanEntry(
                    content="Fix it",
                    priority=PlanEntryPriority.HIGH,
                    status=PlanEntryStatus.PENDING,
                )
            ]
        ),
        sdk.AgentPlanUpdate,
    ),
    (
        AvailableCommandsUpdate(
            available_commands=[
                AvailableCommand(
                    name="web", description="Search", input=AvailableCommandInput(hint="query")
                )
            ]
        ),
        sdk.AvailableCommandsUpdate,
    ),
    (CurrentModeUpdate(current_mode_id="plan"), sdk.CurrentModeUpdate),
    (
        ConfigOptionUpdate(
            config_options=[BooleanConfigOption(id="web", name="Web", current_value=True)]
        ),
        sdk.ConfigOptionUpdate,
    ),
    (SessionInfoUpdate(title="Login test"), sdk.SessionInfoUpdate),
    (SessionInfoUpdate(title=None), sdk.SessionInfoUpdate),
    (UsageUpdate(used=10, size=100, cost=Cost(amount=0.01, currency="EUR")), sdk.UsageUpdate),
]


@pytest.mark.parametrize(("model", "oracle"), [e[1:] for e in EMITTED], ids=[e[0] for e in EMITTED])
def test_what_we_emit_validates_with_the_sdk_and_reads_back_unchanged(
    model: WireModel, oracle: Any
) -> None:
    dumped = model.dump()
    parsed = sdk_validate(oracle, dumped)
    assert sdk_dump(parsed) == dumped


@pytest.mark.parametrize(("update", "oracle"), UPDATES, ids=[type(u).__name__ for u, _ in UPDATES])
def test_every_update_kind_we_emit_is_the_same_variant_for_the_sdk(
    update: WireModel, oracle: type[BaseModel]
) -> None:
    dumped = SessionNotification(session_id=SESSION_ID, update=update).dump()
    parsed = sdk.SessionNotification.model_validate(dumped)
    assert type(parsed.update) is oracle
    assert sdk_dump(parsed) == dumped


def test_every_v1_update_kind_is_covered() -> None:
    kinds = {u.dump()["sessionUpdate"] for u, _ in UPDATES}
    golden = {p.name.split(".")[3] for p in GOLDEN_DIR.glob("session.update.notification.*.json")}
    assert kinds == golden
    assert len(kinds) == 11


# --- direction 2: golden samples ------------------------------------------------------------------


def golden_files() -> list[Path]:
    files = sorted(GOLDEN_DIR.glob("*.json"))
    assert files, f"no golden samples in {GOLDEN_DIR}"
    return files


def split_name(path: Path) -> tuple[str, str]:
    """``session.update.notification.plan.json`` -> (``session/update``, ``notification``)."""
    parts = path.name.removesuffix(".json").split(".")
    for i, part in enumerate(parts):
        if part in ("request", "response", "notification"):
            return "/".join(parts[:i]), part
    raise AssertionError(f"golden file name without a message kind: {path.name}")


def golden_payload(path: Path) -> tuple[str, str, Any]:
    message = json.loads(path.read_text(encoding="utf-8"))
    method, kind = split_name(path)
    assert message["jsonrpc"] == "2.0"
    if kind == "response":
        assert "method" not in message
        return method, kind, message["result"]
    assert message["method"] == method
    assert ("id" in message) == (kind == "request")
    return method, kind, message["params"]


def ours_for(method: str, kind: str) -> type[WireModel]:
    if kind == "response":
        return RESULTS[method]
    if kind == "notification":
        return NOTIFICATION_PARAMS[method]
    return REQUEST_PARAMS[method]


def sdk_for(method: str, kind: str) -> Any:
    return SDK_RESULTS[method] if kind == "response" else SDK_PARAMS[method]


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.name)
def test_a_golden_sample_parses_with_our_models_and_dumps_back_identically(path: Path) -> None:
    method, kind, payload = golden_payload(path)
    model = ours_for(method, kind).parse(payload)
    # A null result (session/load, fs/write_text_file) is read as {} and written as {}.
    assert model.dump() == ({} if payload is None else payload)
    assert ours_for(method, kind).parse_json(json.dumps(payload)).dump() == model.dump()


@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.name)
def test_a_golden_sample_is_valid_for_the_sdk_and_uses_only_fields_it_knows(path: Path) -> None:
    method, kind, payload = golden_payload(path)
    data = {} if payload is None else payload
    parsed = sdk_validate(sdk_for(method, kind), data)
    # The SDK drops fields it does not know, so an identical re-dump proves there are none.
    assert sdk_dump(parsed) == data


def test_every_method_in_our_tables_has_a_golden_sample_and_an_sdk_model() -> None:
    covered = {split_name(p) for p in golden_files()}
    for method in REQUEST_PARAMS:
        assert (method, "request") in covered, method
        assert (method, "response") in covered, method
        assert method in SDK_PARAMS and method in SDK_RESULTS
    for method in NOTIFICATION_PARAMS:
        assert (method, "notification") in covered, method
