"""The ACP wire models: faithful round trips, forward compatibility, leniency, no invented nulls."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from acp_bridge.wire.acp import (
    LoadSessionResponse,
    McpServerHttp,
    McpServerStdio,
    NewSessionRequest,
    NewSessionResponse,
    PromptAnswer,
    PromptRequest,
    PromptResponse,
    ResumeSessionResponse,
    SelectConfigOption,
    SetSessionConfigOptionRequest,
    StopReason,
    UnknownConfigOption,
)
from acp_bridge.wire.base import EmptyResponse, WireModel
from acp_bridge.wire.client_methods import (
    CancelledOutcome,
    CreateTerminalRequest,
    PermissionOptionKind,
    ReadTextFileRequest,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SelectedOutcome,
    TerminalOutputResponse,
    UnknownOutcome,
    WaitForTerminalExitResponse,
)
from acp_bridge.wire.content import (
    CONTENT_BLOCK_ADAPTER,
    EmbeddedResource,
    TextContent,
    TextResourceContents,
    UnknownContent,
)
from acp_bridge.wire.initialize import (
    AgentAuthMethod,
    AgentCapabilities,
    InitializeRequest,
    InitializeResponse,
    TerminalAuthMethod,
    UnknownAuthMethod,
)
from acp_bridge.wire.methods import NOTIFICATION_PARAMS, REQUEST_PARAMS, RESULTS
from acp_bridge.wire.updates import (
    SESSION_UPDATE_ADAPTER,
    AgentMessageChunk,
    CurrentModeUpdate,
    SessionInfoUpdate,
    SessionNotification,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    ToolCallUpdate,
    ToolKind,
    UnknownToolCallContent,
    UnknownUpdate,
    UsageUpdate,
)

WIRE_DIR = Path(__file__).resolve().parents[2] / "acp_bridge" / "wire"
SESSION_ID = "sess_unit"

KNOWN_UPDATE_KINDS = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
    }
)

# --- hypothesis strategies -----------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=16)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def extra_fields(reserved: set[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Unknown fields: any key that is not one of the model's wire keys."""
    keys = st.text(min_size=1, max_size=12).filter(lambda k: k not in reserved and k != "_meta")
    return st.dictionaries(keys, json_values, max_size=4)


def wire_keys(model: type[WireModel]) -> set[str]:
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        keys.add(info.alias or name)
        if info.serialization_alias:
            keys.add(info.serialization_alias)
    return keys | {"modeId"}  # CurrentModeUpdate's alternative spelling


def contains_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(contains_none(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_none(v) for v in value)
    return False


AGENT_CHUNK: dict[str, Any] = {
    "sessionId": SESSION_ID,
    "update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "Hello"},
    },
}

SAMPLES: list[tuple[type[WireModel], dict[str, Any]]] = [
    (TextContent, {"type": "text", "text": "hi"}),
    (SessionNotification, AGENT_CHUNK),
    (PromptResponse, {"stopReason": "end_turn"}),
    (InitializeResponse, {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}),
    (NewSessionRequest, {"cwd": "/tmp/p", "mcpServers": []}),
    (ToolCallUpdate, {"toolCallId": "c1", "status": "in_progress"}),
    (RequestPermissionResponse, {"outcome": {"outcome": "cancelled"}}),
]


# --- round trips ---------------------------------------------------------------------------------


def test_unknown_fields_and_meta_survive_a_round_trip_at_every_level() -> None:
    data = {
        "sessionId": SESSION_ID,
        "_meta": {"traceparent": "00-abc-def-01", "vendor.example": {"n": [1, 2.5, None]}},
        "futureField": {"nested": True},
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Run tests",
            "status": "pending",
            "_meta": {"x": 1},
            "content": [
                {
                    "type": "content",
                    "content": {"type": "text", "text": "ok", "_meta": {}, "v2Only": "yes"},
                }
            ],
            "rawInput": {"command": ["pytest", "-x"], "timeout": None},
        },
    }
    notification = SessionNotification.parse(data)
    assert notification.meta == data["_meta"]
    assert notification.model_extra == {"futureField": {"nested": True}}
    assert notification.dump() == data
    assert json.loads(notification.dump_json()) == data


@settings(database=None, max_examples=60, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize(("model", "sample"), SAMPLES, ids=[m.__name__ for m, _ in SAMPLES])
def test_arbitrary_extra_fields_survive_a_round_trip(
    model: type[WireModel], sample: dict[str, Any], data: st.DataObject
) -> None:
    extras = data.draw(extra_fields(wire_keys(model)))
    wire = {**sample, **extras}
    assert model.parse(wire).dump() == wire
    assert model.parse_json(json.dumps(wire)).dump() == wire


@settings(database=None, max_examples=60, deadline=None)
@given(meta=st.dictionaries(st.text(max_size=8), json_values, max_size=4))
def test_an_arbitrary_meta_object_survives_a_round_trip(meta: dict[str, Any]) -> None:
    wire = {**AGENT_CHUNK, "_meta": meta}
    wire["update"] = {**AGENT_CHUNK["update"], "_meta": meta}
    parsed = SessionNotification.parse(wire)
    assert parsed.meta == meta
    assert parsed.dump() == wire


def test_keys_are_camel_case_on_the_wire_and_snake_case_in_python() -> None:
    request = NewSessionRequest(cwd="/p", mcp_servers=[], additional_directories=["/q"])
    assert request.dump() == {"cwd": "/p", "mcpServers": [], "additionalDirectories": ["/q"]}
    assert NewSessionRequest.parse(request.dump()).additional_directories == ["/q"]


def test_snake_case_keys_from_the_wire_stay_unknown_fields() -> None:
    wire = {"sessionId": "real", "session_id": "impostor", "meta": {"not": "_meta"}}
    parsed = NewSessionResponse.parse(wire)
    assert parsed.session_id == "real"
    assert parsed.meta is None
    assert parsed.model_extra == {"session_id": "impostor", "meta": {"not": "_meta"}}
    assert parsed.dump() == wire


def test_dump_json_is_one_compact_line() -> None:
    encoded = SessionNotification.parse(AGENT_CHUNK).dump_json()
    assert b"\n" not in encoded
    assert b": " not in encoded
    assert json.loads(encoded) == AGENT_CHUNK


# --- no invented nulls ---------------------------------------------------------------------------

MINIMAL: list[WireModel] = [
    InitializeRequest(protocol_version=1),
    InitializeResponse(protocol_version=1),
    NewSessionRequest(
        cwd="/p", mcp_servers=[McpServerStdio(name="s", command="c", args=[], env=[])]
    ),
    PromptRequest(session_id=SESSION_ID, prompt=[TextContent(text="hi")]),
    PromptResponse(stop_reason=StopReason.END_TURN),
    SessionNotification(
        session_id=SESSION_ID, update=AgentMessageChunk(content=TextContent(text="x"))
    ),
    SessionNotification(session_id=SESSION_ID, update=ToolCallStart(tool_call_id="c", title="t")),
    ToolCallProgress(tool_call_id="c"),
    RequestPermissionResponse.cancelled(),
    TerminalOutputResponse(output="", truncated=False),
    WaitForTerminalExitResponse(),
    EmptyResponse(),
    TextContent(text="x", meta=None),
]


@pytest.mark.parametrize("model", MINIMAL, ids=[type(m).__name__ for m in MINIMAL])
def test_optional_fields_that_were_never_set_are_not_emitted_as_null(model: WireModel) -> None:
    dumped = model.dump()
    assert not contains_none(dumped), dumped
    assert "_meta" not in json.dumps(dumped)


def test_discriminator_tags_are_emitted_on_models_built_in_python() -> None:
    assert AgentMessageChunk(content=TextContent(text="x")).dump() == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "x"},
    }
    assert McpServerHttp(name="h", url="https://h", headers=[]).dump()["type"] == "http"


def test_an_explicit_null_that_means_clear_is_kept() -> None:
    cleared = SessionInfoUpdate.parse({"sessionUpdate": "session_info_update", "title": None})
    assert "title" in cleared.model_fields_set
    assert "updated_at" not in cleared.model_fields_set
    assert cleared.dump() == {"sessionUpdate": "session_info_update", "title": None}
    assert SessionInfoUpdate(title=None).dump() == cleared.dump()


def test_meta_set_to_none_is_never_emitted() -> None:
    assert TextContent.parse({"type": "text", "text": "x", "_meta": None}).dump() == {
        "type": "text",
        "text": "x",
    }


# --- session/update union ------------------------------------------------------------------------


@settings(database=None, max_examples=60, deadline=None)
@given(
    kind=st.text(min_size=1, max_size=30).filter(lambda k: k not in KNOWN_UPDATE_KINDS),
    extras=extra_fields({"sessionUpdate"}),
)
def test_an_unknown_update_kind_parses_as_unknown_update_and_dumps_back_identically(
    kind: str, extras: dict[str, Any]
) -> None:
    update = {"sessionUpdate": kind, **extras}
    wire = {"sessionId": SESSION_ID, "update": update}
    parsed = SessionNotification.parse(wire)
    assert isinstance(parsed.update, UnknownUpdate)
    assert parsed.update.session_update == kind
    assert parsed.dump() == wire


def test_unstable_update_kinds_are_kept_whole() -> None:
    notice = {
        "sessionUpdate": "notice",
        "severity": "warning",
        "title": "Rate limited",
        "description": "Retrying in 20 s",
        "_meta": {"retryAfterS": 20},
    }
    parsed = SESSION_UPDATE_ADAPTER.validate_python(notice, by_name=False)
    assert isinstance(parsed, UnknownUpdate)
    assert parsed.model_extra == {
        "severity": "warning",
        "title": "Rate limited",
        "description": "Retrying in 20 s",
    }
    assert parsed.dump() == notice


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "agent_message_chunk"},
        {"sessionUpdate": "agent_message_chunk", "content": "plain string"},
        {"sessionUpdate": "tool_call", "toolCallId": "c1"},
        {"sessionUpdate": "tool_call_update", "status": "completed"},
        {"sessionUpdate": "usage_update", "used": "lots", "size": 100},
        {"sessionUpdate": "plan", "entries": "none"},
        {"sessionUpdate": "current_mode_update"},
        {"sessionUpdate": 7},
        {"content": {"type": "text", "text": "no tag"}},
    ],
    ids=lambda u: str(u.get("sessionUpdate", "missing")),
)
def test_a_malformed_known_update_kind_is_an_error_not_an_unknown_update(
    update: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        SessionNotification.parse({"sessionId": SESSION_ID, "update": update})


def test_current_mode_update_accepts_mode_id_and_writes_current_mode_id() -> None:
    for key in ("currentModeId", "modeId"):
        parsed = CurrentModeUpdate.parse({"sessionUpdate": "current_mode_update", key: "plan"})
        assert parsed.current_mode_id == "plan"
        assert parsed.dump() == {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}


def test_an_unknown_content_block_inside_a_known_update_is_kept() -> None:
    block = {"type": "video", "uri": "file:///v.mp4", "durationS": 3}
    parsed = AgentMessageChunk.parse({"sessionUpdate": "agent_message_chunk", "content": block})
    assert isinstance(parsed.content, UnknownContent)
    assert parsed.dump()["content"] == block


def test_embedded_resources_pick_text_or_blob() -> None:
    text = CONTENT_BLOCK_ADAPTER.validate_python(
        {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}}
    )
    assert isinstance(text, EmbeddedResource)
    assert isinstance(text.resource, TextResourceContents)
    with pytest.raises(ValidationError):
        CONTENT_BLOCK_ADAPTER.validate_python({"type": "resource", "resource": {"uri": "x"}})


def test_unknown_tool_status_and_kind_strings_are_kept_and_known_ones_are_enums() -> None:
    parsed = ToolCallProgress.parse(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c",
            "status": "cancelled",
            "kind": "read",
        }
    )
    assert parsed.status == "cancelled"
    assert not isinstance(parsed.status, ToolCallStatus)
    assert parsed.kind is ToolKind.READ
    assert ToolCallStatus.is_finished(parsed.status)
    assert not ToolCallStatus.is_finished(ToolCallStatus.IN_PROGRESS)
    assert parsed.dump()["status"] == "cancelled"


def test_invalid_tool_call_content_items_are_skipped_and_unknown_ones_kept() -> None:
    parsed = ToolCallStart.parse(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c",
            "title": "t",
            "kind": 42,
            "content": [
                {"type": "diff"},
                {"type": "terminal", "terminalId": "t1"},
                {"type": "map"},
            ],
        }
    )
    assert parsed.kind is None
    assert parsed.content is not None
    assert [type(c).__name__ for c in parsed.content] == [
        "TerminalToolCallContent",
        UnknownToolCallContent.__name__,
    ]


def test_usage_update_reads_tokens_and_cost() -> None:
    parsed = UsageUpdate.parse(
        {"sessionUpdate": "usage_update", "used": 10, "size": 100, "cost": {"amount": 0.5}}
    )
    assert (parsed.used, parsed.size, parsed.cost) == (10, 100, None)  # malformed cost salvaged


# --- initialize ----------------------------------------------------------------------------------


def test_capabilities_left_out_mean_unsupported() -> None:
    caps = InitializeResponse.parse({"protocolVersion": 1}).agent_capabilities
    assert not caps.supports_load()
    assert not caps.supports_resume()
    assert not caps.supports_list()
    assert not caps.prompt_capabilities.image
    assert InitializeResponse.parse({"protocolVersion": 1}).dump() == {"protocolVersion": 1}


def test_capability_predicates_read_objects_and_flags() -> None:
    caps = AgentCapabilities.parse(
        {
            "loadSession": True,
            "sessionCapabilities": {"resume": {}, "close": {}, "list": None, "fork": {"x": 1}},
            "auth": {"logout": {}},
        }
    )
    assert caps.supports_load()
    assert caps.supports_resume()
    assert caps.supports_close()
    assert caps.supports_fork()
    assert caps.supports_logout()
    assert not caps.supports_list()
    assert not caps.supports_delete()
    assert not caps.supports_additional_directories()


def test_malformed_optional_capabilities_fall_back_to_unsupported() -> None:
    caps = AgentCapabilities.parse(
        {"loadSession": "yes", "promptCapabilities": [], "sessionCapabilities": {"resume": True}}
    )
    assert not caps.supports_load()
    assert not caps.prompt_capabilities.image
    assert not caps.supports_resume()


def test_auth_methods_are_lenient() -> None:
    response = InitializeResponse.parse(
        {
            "protocolVersion": 1,
            "authMethods": [
                {"id": "oauth", "name": "Log in"},
                {"type": "agent", "id": "key", "name": "API key"},
                {"type": "terminal", "id": "cli", "name": "Terminal", "args": ["--login"]},
                {"type": "env_var", "id": "env", "name": "Env", "vars": [{"name": "KEY"}]},
                {"name": "no id"},
                "not an object",
                {"type": "terminal", "id": "broken"},
            ],
        }
    )
    methods = response.auth_methods
    assert [type(m) for m in methods] == [
        AgentAuthMethod,
        AgentAuthMethod,
        TerminalAuthMethod,
        UnknownAuthMethod,
    ]
    assert methods[3].model_extra == {"vars": [{"name": "KEY"}]}
    assert response.needs_authentication()
    assert methods[0].dump() == {"id": "oauth", "name": "Log in"}


def test_a_legacy_date_protocol_version_reads_as_the_unsupported_version_zero() -> None:
    assert InitializeRequest.parse({"protocolVersion": "2024-11-05"}).protocol_version == 0
    assert InitializeRequest.parse({"protocolVersion": "1"}).protocol_version == 1
    with pytest.raises(ValidationError):
        InitializeRequest.parse({"protocolVersion": 70000})


# --- session setup and prompt --------------------------------------------------------------------


def test_a_null_load_or_resume_result_reads_as_empty() -> None:
    assert LoadSessionResponse.parse(None).dump() == {}
    assert LoadSessionResponse.parse_json("null").modes is None
    assert ResumeSessionResponse.parse(None).dump() == {}
    assert EmptyResponse.parse(None).dump() == {}


def test_mcp_servers_keep_unknown_variants_as_dicts() -> None:
    acp_server = {"type": "acp", "name": "inner", "serverId": "srv-1"}
    stdio = {"name": "fs", "command": "mcp-fs", "args": [], "env": []}
    request = NewSessionRequest.parse({"cwd": "/p", "mcpServers": [stdio, acp_server]})
    assert isinstance(request.mcp_servers[0], McpServerStdio)
    assert request.mcp_servers[1] == acp_server
    assert request.dump()["mcpServers"] == [stdio, acp_server]


def test_config_options_of_unknown_type_are_kept() -> None:
    response = NewSessionResponse.parse(
        {
            "sessionId": "s",
            "configOptions": [
                {"type": "select", "id": "m", "name": "Model", "currentValue": "a", "options": []},
                {"type": "slider", "id": "t", "name": "Temp", "min": 0},
            ],
        }
    )
    assert response.config_options is not None
    assert isinstance(response.config_options[0], SelectConfigOption)
    assert isinstance(response.config_options[1], UnknownConfigOption)


def test_set_config_option_constructors() -> None:
    assert SetSessionConfigOptionRequest.select("s", "model", "opus").dump() == {
        "sessionId": "s",
        "configId": "model",
        "value": "opus",
    }
    assert SetSessionConfigOptionRequest.boolean("s", "web", False).dump() == {
        "sessionId": "s",
        "configId": "web",
        "type": "boolean",
        "value": False,
    }


def test_known_stop_reasons_are_enum_members_and_unknown_ones_stay_strings() -> None:
    known = PromptResponse.parse({"stopReason": "cancelled"})
    assert known.stop_reason is StopReason.CANCELLED
    assert known.is_cancelled()
    unknown = PromptResponse.parse({"stopReason": "paused_for_input"})
    assert unknown.stop_reason == "paused_for_input"
    assert not unknown.is_cancelled()
    assert unknown.dump() == {"stopReason": "paused_for_input"}
    with pytest.raises(ValidationError):
        PromptResponse.parse({"stopReason": None})


def test_prompt_usage_is_read_and_a_malformed_one_is_ignored() -> None:
    usage = {"totalTokens": 3, "inputTokens": 2, "outputTokens": 1, "thoughtTokens": 0}
    parsed = PromptResponse.parse({"stopReason": "end_turn", "usage": usage})
    assert parsed.usage is not None
    assert parsed.usage.total_tokens == 3
    assert parsed.dump()["usage"] == usage
    assert PromptResponse.parse({"stopReason": "end_turn", "usage": {"total": 1}}).usage is None



@settings(max_examples=300, deadline=None)
@given(
    stop_reason=st.text(max_size=20),
    others=st.dictionaries(st.text(max_size=12), json_values, max_size=5),
)
def test_a_prompt_answer_with_a_string_stop_reason_always_validates_later(
    stop_reason: str, others: dict[str, Any]
) -> None:
    """PromptAnswer defers the model to first use only because a result whose stopReason is a
    string cannot fail validation (usage and _meta salvage, unknown keys are kept): checked
    here against the model itself, with any other keys and values."""
    raw = {**others, "stopReason": stop_reason}
    answer = PromptAnswer.read(raw)
    assert answer.stop_reason == stop_reason
    assert answer.is_cancelled() == (stop_reason == "cancelled")
    assert answer.response == PromptResponse.parse(raw)
    assert answer.response is answer.response  # built once


@pytest.mark.parametrize(
    "raw", [None, [], "end_turn", {}, {"stopReason": None}, {"stopReason": 3}, {"stop_reason": "x"}]
)
def test_a_prompt_answer_without_a_string_stop_reason_is_refused_at_once(raw: Any) -> None:
    with pytest.raises(ValidationError):
        PromptAnswer.read(raw)


def test_a_prompt_answer_of_a_parsed_response_keeps_it() -> None:
    response = PromptResponse.parse({"stopReason": "cancelled"})
    answer = PromptAnswer.of(response)
    assert answer.response is response
    assert answer.stop_reason == "cancelled" and answer.is_cancelled()

# --- agent -> client methods ---------------------------------------------------------------------


def test_permission_outcome_constructors() -> None:
    assert RequestPermissionResponse.selected("allow-once").dump() == {
        "outcome": {"outcome": "selected", "optionId": "allow-once"}
    }
    assert RequestPermissionResponse.cancelled().dump() == {"outcome": {"outcome": "cancelled"}}
    assert RequestPermissionResponse.cancelled().is_cancelled()
    parsed = RequestPermissionResponse.parse({"outcome": {"outcome": "selected", "optionId": "x"}})
    assert isinstance(parsed.outcome, SelectedOutcome)
    future = RequestPermissionResponse.parse({"outcome": {"outcome": "deferred", "until": 5}})
    assert isinstance(future.outcome, UnknownOutcome)
    assert not isinstance(future.outcome, CancelledOutcome)


def test_permission_requests_read_the_tool_call_and_options() -> None:
    request = RequestPermissionRequest.parse(
        {
            "sessionId": "s",
            "toolCall": {"toolCallId": "c", "title": "rm -rf build", "kind": "delete"},
            "options": [
                {"optionId": "y", "name": "Allow", "kind": "allow_once"},
                {"optionId": "z", "name": "Maybe", "kind": "ask_later"},
            ],
        }
    )
    assert request.tool_call.tool_call_id == "c"
    assert request.options[0].kind is PermissionOptionKind.ALLOW_ONCE
    assert request.options[1].kind == "ask_later"


def test_fs_and_terminal_params_salvage_malformed_optionals() -> None:
    read = ReadTextFileRequest.parse({"sessionId": "s", "path": "/a", "line": -1, "limit": 5})
    assert (read.line, read.limit) == (None, 5)
    create = CreateTerminalRequest.parse(
        {"sessionId": "s", "command": "ls", "env": [{"name": "A", "value": "1"}, {"name": "B"}]}
    )
    assert create.env is not None
    assert [e.name for e in create.env] == ["A"]


# --- tables and layering -------------------------------------------------------------------------


def test_method_tables_map_methods_to_wire_models() -> None:
    for table in (REQUEST_PARAMS, RESULTS, NOTIFICATION_PARAMS):
        for model in table.values():
            assert issubclass(model, WireModel)
    assert REQUEST_PARAMS.keys() == RESULTS.keys()
    assert REQUEST_PARAMS["session/prompt"] is PromptRequest
    assert RESULTS["session/load"] is LoadSessionResponse


@pytest.mark.parametrize("path", sorted(WIRE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_wire_modules_import_no_sdk_no_io_and_nothing_above_them(path: Path) -> None:
    forbidden = {"acp", "litellm", "anyio", "os", "signal", "time", "asyncio", "trio"}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top not in forbidden, f"{path.name} imports {name}"
            if top == "acp_bridge":
                allowed = ("acp_bridge.wire", "acp_bridge.errors", "acp_bridge.record")
                assert name.startswith(allowed), name
