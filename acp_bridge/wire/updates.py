"""session/update: the notification that streams a turn (and a session/load replay).

acp-protocol.md section 6. ``update`` is a union discriminated on ``sessionUpdate`` over every v1
kind. A kind this version does not know parses as :class:`UnknownUpdate` with every field kept
(v1 says to ignore unknown kinds; the bridge still relays them), while a malformed *known* kind
is a validation error.

Also here: the tool-call shapes, which ``session/request_permission`` reuses. The enums
(``ToolKind``, ``ToolCallStatus``, ``PlanEntry*``) live in :mod:`acp_bridge.wire.kinds` and are
re-exported.
"""

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, ConfigDict, Field, Tag, TypeAdapter

from acp_bridge.wire.acp import ConfigOption
from acp_bridge.wire.base import SALVAGE, SKIP_INVALID, UNKNOWN_TAG, WireModel, tag_discriminator
from acp_bridge.wire.content import ContentBlock
from acp_bridge.wire.kinds import PlanEntryPriority, PlanEntryStatus, ToolCallStatus, ToolKind

__all__ = [
    "SESSION_UPDATE_ADAPTER",
    "AgentMessageChunk",
    "AgentThoughtChunk",
    "AvailableCommand",
    "AvailableCommandInput",
    "AvailableCommandsUpdate",
    "ConfigOptionUpdate",
    "ContentToolCallContent",
    "Cost",
    "CurrentModeUpdate",
    "DiffToolCallContent",
    "PlanEntry",
    "PlanEntryPriority",
    "PlanEntryStatus",
    "PlanUpdate",
    "SessionInfoUpdate",
    "SessionNotification",
    "SessionUpdate",
    "TerminalToolCallContent",
    "ToolCallContent",
    "ToolCallLocation",
    "ToolCallProgress",
    "ToolCallStart",
    "ToolCallStatus",
    "ToolCallUpdate",
    "ToolKind",
    "UnknownToolCallContent",
    "UnknownUpdate",
    "UsageUpdate",
    "UserMessageChunk",
]


# --- tool calls ---------------------------------------------------------------------------------


class ContentToolCallContent(WireModel):
    """``{type:"content", content: ContentBlock}``."""

    type: Literal["content"] = "content"
    content: ContentBlock


class DiffToolCallContent(WireModel):
    """``{type:"diff", path, oldText?, newText}``; ``oldText`` absent means a new file."""

    type: Literal["diff"] = "diff"
    path: str
    old_text: str | None = None
    new_text: str


class TerminalToolCallContent(WireModel):
    """``{type:"terminal", terminalId}``; stays visible after the terminal is released."""

    type: Literal["terminal"] = "terminal"
    terminal_id: str


class UnknownToolCallContent(WireModel):
    """Tool-call content of a type this version does not know; all fields kept."""

    type: str


ToolCallContent = Annotated[
    Annotated[ContentToolCallContent, Tag("content")]
    | Annotated[DiffToolCallContent, Tag("diff")]
    | Annotated[TerminalToolCallContent, Tag("terminal")]
    | Annotated[UnknownToolCallContent, Tag(UNKNOWN_TAG)],
    tag_discriminator("type", "type", ("content", "diff", "terminal")),
]


class ToolCallLocation(WireModel):
    """``{path, line?}``: a file the tool call touches (line is 1-based)."""

    path: str
    line: Annotated[int | None, SALVAGE] = None


# Known values become enum members; unknown strings stay str; anything else salvages to None.
ToolKindField = Annotated[ToolKind | str | None, Field(union_mode="left_to_right"), SALVAGE]
ToolCallStatusField = Annotated[
    ToolCallStatus | str | None, Field(union_mode="left_to_right"), SALVAGE
]


class ToolCallUpdate(WireModel):
    """A tool call's fields, all optional but ``toolCallId``: only changed fields are sent.

    This is ``session/request_permission``'s ``toolCall`` and the body of ``tool_call_update``.
    """

    tool_call_id: str
    title: Annotated[str | None, SALVAGE] = None
    kind: ToolKindField = None
    status: ToolCallStatusField = None
    content: Annotated[list[ToolCallContent] | None, SKIP_INVALID] = None
    locations: Annotated[list[ToolCallLocation] | None, SKIP_INVALID] = None
    raw_input: Any = None
    raw_output: Any = None


# --- session/update variants --------------------------------------------------------------------


class UserMessageChunk(WireModel):
    """A chunk of the user's message (seen in session/load replays)."""

    session_update: Literal["user_message_chunk"] = "user_message_chunk"
    content: ContentBlock
    message_id: Annotated[str | None, SALVAGE] = None


class AgentMessageChunk(WireModel):
    """A chunk of the agent's reply; a new ``messageId`` starts a new message."""

    session_update: Literal["agent_message_chunk"] = "agent_message_chunk"
    content: ContentBlock
    message_id: Annotated[str | None, SALVAGE] = None


class AgentThoughtChunk(WireModel):
    """A chunk of the agent's reasoning."""

    session_update: Literal["agent_thought_chunk"] = "agent_thought_chunk"
    content: ContentBlock
    message_id: Annotated[str | None, SALVAGE] = None


class ToolCallStart(WireModel):
    """``tool_call``: a new tool call (``title`` required; status defaults to pending)."""

    session_update: Literal["tool_call"] = "tool_call"
    tool_call_id: str
    title: str
    kind: ToolKindField = None
    status: ToolCallStatusField = None
    content: Annotated[list[ToolCallContent] | None, SKIP_INVALID] = None
    locations: Annotated[list[ToolCallLocation] | None, SKIP_INVALID] = None
    raw_input: Any = None
    raw_output: Any = None


class ToolCallProgress(ToolCallUpdate):
    """``tool_call_update``: changed fields of an existing tool call."""

    session_update: Literal["tool_call_update"] = "tool_call_update"


class PlanEntry(WireModel):
    """``{content, priority, status}``."""

    content: str
    priority: Annotated[PlanEntryPriority | str, Field(union_mode="left_to_right")]
    status: Annotated[PlanEntryStatus | str, Field(union_mode="left_to_right")]


class PlanUpdate(WireModel):
    """``plan``: the full plan, replacing the previous one."""

    session_update: Literal["plan"] = "plan"
    entries: list[PlanEntry]


class AvailableCommandInput(WireModel):
    """``{hint}``: the command takes free text after its name."""

    hint: str


class AvailableCommand(WireModel):
    """A slash command: ``{name, description, input?}``."""

    name: str
    description: str
    input: Annotated[AvailableCommandInput | None, SALVAGE] = None


class AvailableCommandsUpdate(WireModel):
    """``available_commands_update``: may arrive at any time, even after a load response."""

    session_update: Literal["available_commands_update"] = "available_commands_update"
    available_commands: Annotated[list[AvailableCommand], SKIP_INVALID]


class CurrentModeUpdate(WireModel):
    """``current_mode_update``: ``currentModeId`` (one doc example says ``modeId``; both parse,
    and the dump always says ``currentModeId``)."""

    session_update: Literal["current_mode_update"] = "current_mode_update"
    current_mode_id: str = Field(
        validation_alias=AliasChoices("currentModeId", "modeId"),
        serialization_alias="currentModeId",
    )


class ConfigOptionUpdate(WireModel):
    """``config_option_update``: the complete config option state."""

    session_update: Literal["config_option_update"] = "config_option_update"
    config_options: Annotated[list[ConfigOption], SKIP_INVALID]


class SessionInfoUpdate(WireModel):
    """``session_info_update``: omitted means unchanged, ``null`` clears.

    Check ``"title" in update.model_fields_set`` to tell "cleared" from "unchanged".
    """

    session_update: Literal["session_info_update"] = "session_info_update"
    title: Annotated[str | None, SALVAGE] = None
    updated_at: Annotated[str | None, SALVAGE] = None


class Cost(WireModel):
    """``{amount, currency}``; currency is an ISO 4217 code."""

    amount: float
    currency: str


class UsageUpdate(WireModel):
    """``usage_update``: tokens in context (``used``) and the window ``size``."""

    session_update: Literal["usage_update"] = "usage_update"
    used: int
    size: int
    cost: Annotated[Cost | None, SALVAGE] = None


class UnknownUpdate(WireModel):
    """A ``sessionUpdate`` kind this version does not know (unstable or newer); kept whole."""

    session_update: str


_KNOWN_KINDS = (
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
)

SessionUpdate = Annotated[
    Annotated[UserMessageChunk, Tag("user_message_chunk")]
    | Annotated[AgentMessageChunk, Tag("agent_message_chunk")]
    | Annotated[AgentThoughtChunk, Tag("agent_thought_chunk")]
    | Annotated[ToolCallStart, Tag("tool_call")]
    | Annotated[ToolCallProgress, Tag("tool_call_update")]
    | Annotated[PlanUpdate, Tag("plan")]
    | Annotated[AvailableCommandsUpdate, Tag("available_commands_update")]
    | Annotated[CurrentModeUpdate, Tag("current_mode_update")]
    | Annotated[ConfigOptionUpdate, Tag("config_option_update")]
    | Annotated[SessionInfoUpdate, Tag("session_info_update")]
    | Annotated[UsageUpdate, Tag("usage_update")]
    | Annotated[UnknownUpdate, Tag(UNKNOWN_TAG)],
    tag_discriminator("sessionUpdate", "session_update", _KNOWN_KINDS),
]
"""Any ``update`` payload, discriminated on ``sessionUpdate``."""

SESSION_UPDATE_ADAPTER: TypeAdapter[SessionUpdate] = TypeAdapter(
    SessionUpdate, config=ConfigDict(defer_build=True)
)


class SessionNotification(WireModel):
    """``session/update`` params: ``{sessionId, update}``."""

    session_id: str
    update: SessionUpdate
