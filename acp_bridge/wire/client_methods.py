"""Agent → client requests: session/request_permission, fs/* and terminal/*.

acp-protocol.md section 5. The bridge must answer these even when it implements nothing behind
them: a pending permission request is answered ``cancelled`` when the turn is cancelled (section
7), and unadvertised fs/terminal methods get -32601. The result models let a handler that does
implement them answer in spec shape.
"""

from typing import Annotated, Literal, Self

from pydantic import Field, StrictBool, Tag

from acp_bridge.wire.base import SALVAGE, SKIP_INVALID, UNKNOWN_TAG, WireModel, tag_discriminator
from acp_bridge.wire.kinds import PermissionOptionKind
from acp_bridge.wire.session_requests import EnvVariable
from acp_bridge.wire.updates import ToolCallUpdate

__all__ = [
    "CancelledOutcome",
    "CreateTerminalRequest",
    "CreateTerminalResponse",
    "KillTerminalRequest",
    "PermissionOption",
    "PermissionOptionKind",
    "PermissionOutcome",
    "ReadTextFileRequest",
    "ReadTextFileResponse",
    "ReleaseTerminalRequest",
    "RequestPermissionRequest",
    "RequestPermissionResponse",
    "SelectedOutcome",
    "TerminalExitStatus",
    "TerminalOutputRequest",
    "TerminalOutputResponse",
    "TerminalRequest",
    "UnknownOutcome",
    "WaitForTerminalExitRequest",
    "WaitForTerminalExitResponse",
    "WriteTextFileRequest",
]


# --- session/request_permission -----------------------------------------------------------------


class PermissionOption(WireModel):
    """``{optionId, name, kind}``."""

    option_id: str
    name: str
    kind: Annotated[PermissionOptionKind | str, Field(union_mode="left_to_right")]


class RequestPermissionRequest(WireModel):
    """``session/request_permission`` params: ``{sessionId, toolCall, options[]}``."""

    session_id: str
    tool_call: ToolCallUpdate
    options: list[PermissionOption]


class SelectedOutcome(WireModel):
    """``{outcome:"selected", optionId}``: the user picked one of the offered options."""

    outcome: Literal["selected"] = "selected"
    option_id: str


class CancelledOutcome(WireModel):
    """``{outcome:"cancelled"}``: required for every pending request once the turn is cancelled."""

    outcome: Literal["cancelled"] = "cancelled"


class UnknownOutcome(WireModel):
    """An outcome this version does not know; kept whole."""

    outcome: str


PermissionOutcome = Annotated[
    Annotated[SelectedOutcome, Tag("selected")]
    | Annotated[CancelledOutcome, Tag("cancelled")]
    | Annotated[UnknownOutcome, Tag(UNKNOWN_TAG)],
    tag_discriminator("outcome", "outcome", ("selected", "cancelled")),
]


class RequestPermissionResponse(WireModel):
    """``session/request_permission`` result: ``{outcome: {...}}``."""

    outcome: PermissionOutcome

    @classmethod
    def selected(cls, option_id: str) -> Self:
        return cls(outcome=SelectedOutcome(option_id=option_id))

    @classmethod
    def cancelled(cls) -> Self:
        return cls(outcome=CancelledOutcome())

    def is_cancelled(self) -> bool:
        return isinstance(self.outcome, CancelledOutcome)


# --- fs/* ---------------------------------------------------------------------------------------


class ReadTextFileRequest(WireModel):
    """``fs/read_text_file`` params; ``line`` is 1-based. Gated by ``fs.readTextFile``."""

    session_id: str
    path: str
    line: Annotated[int | None, Field(ge=0), SALVAGE] = None
    limit: Annotated[int | None, Field(ge=0), SALVAGE] = None


class ReadTextFileResponse(WireModel):
    """``fs/read_text_file`` result: ``{content}``."""

    content: str


class WriteTextFileRequest(WireModel):
    """``fs/write_text_file`` params; the result is ``{}`` or ``null``. Gated by
    ``fs.writeTextFile``; the client creates the file if it is missing."""

    session_id: str
    path: str
    content: str


# --- terminal/* ---------------------------------------------------------------------------------


class CreateTerminalRequest(WireModel):
    """``terminal/create`` params; answered at once with a ``terminalId``."""

    session_id: str
    command: str
    args: Annotated[list[str] | None, SKIP_INVALID] = None
    env: Annotated[list[EnvVariable] | None, SKIP_INVALID] = None
    cwd: Annotated[str | None, SALVAGE] = None
    output_byte_limit: Annotated[int | None, Field(ge=0), SALVAGE] = None


class CreateTerminalResponse(WireModel):
    """``terminal/create`` result: ``{terminalId}``."""

    terminal_id: str


class TerminalRequest(WireModel):
    """``{sessionId, terminalId}``: the params shared by the other terminal methods."""

    session_id: str
    terminal_id: str


class TerminalOutputRequest(TerminalRequest):
    """``terminal/output`` params."""


class WaitForTerminalExitRequest(TerminalRequest):
    """``terminal/wait_for_exit`` params."""


class KillTerminalRequest(TerminalRequest):
    """``terminal/kill`` params; the result is ``{}`` and the terminal stays valid."""


class ReleaseTerminalRequest(TerminalRequest):
    """``terminal/release`` params; the result is ``{}``."""


class TerminalExitStatus(WireModel):
    """``{exitCode?, signal?}``."""

    exit_code: Annotated[int | None, SALVAGE] = None
    signal: Annotated[str | None, SALVAGE] = None


class TerminalOutputResponse(WireModel):
    """``terminal/output`` result: ``{output, truncated, exitStatus?}``."""

    output: str
    truncated: StrictBool
    exit_status: Annotated[TerminalExitStatus | None, SALVAGE] = None


class WaitForTerminalExitResponse(WireModel):
    """``terminal/wait_for_exit`` result: ``{exitCode?, signal?}``."""

    exit_code: Annotated[int | None, SALVAGE] = None
    signal: Annotated[str | None, SALVAGE] = None
