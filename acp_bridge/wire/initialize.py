"""initialize and authenticate: version negotiation, capabilities and auth methods.

acp-protocol.md section 3. Capabilities left out mean *unsupported*, and new capabilities are not
breaking changes, so every capability field is optional, salvaged when malformed, and unknown
ones are kept as extras. Flags are strict JSON booleans: pydantic's lax mode would read ``"yes"``
as true, where the reference types call it malformed and fall back to false.

The ``supports_*`` predicates on :class:`AgentCapabilities` are what the bridge gates its optional
calls on.
"""

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, cast

from pydantic import Field, StrictBool, Tag, field_validator

from acp_bridge.wire.base import (
    SALVAGE,
    SKIP_INVALID,
    UNKNOWN_TAG,
    WireModel,
    tag_discriminator,
)

__all__ = [
    "PROTOCOL_VERSION",
    "AgentAuthCapabilities",
    "AgentAuthMethod",
    "AgentCapabilities",
    "AuthCapabilities",
    "AuthMethod",
    "AuthenticateRequest",
    "Capability",
    "ClientCapabilities",
    "ClientSessionCapabilities",
    "ConfigOptionsCapabilities",
    "ElicitationCapabilities",
    "FileSystemCapabilities",
    "Implementation",
    "InitializeRequest",
    "InitializeResponse",
    "McpCapabilities",
    "PromptCapabilities",
    "SessionCapabilities",
    "TerminalAuthMethod",
    "UnknownAuthMethod",
]

PROTOCOL_VERSION = 1
"""The only stable ACP major version. ``0`` was pre-release; ``2`` is an opt-in draft."""


class Capability(WireModel):
    """An object-valued capability: present (usually ``{}``) means supported, absent means not."""


def _has(capability: Capability | None) -> bool:
    return capability is not None


_Model = TypeVar("_Model", bound=WireModel)


def _all_defaults(model: type[_Model]) -> Callable[[], _Model]:
    """The ``default_factory`` of a field holding ``model``, whose fields all have defaults: the
    instance is made with ``model_construct``, as validating nothing would make it, but without
    building ``model``'s validator (an agent leaving a capability out is common)."""
    return lambda: cast(_Model, model.model_construct())


class Implementation(WireModel):
    """``clientInfo`` / ``agentInfo``: ``{name, title?, version}``."""

    name: str
    title: Annotated[str | None, SALVAGE] = None
    version: str


# --- client capabilities ------------------------------------------------------------------------


class FileSystemCapabilities(WireModel):
    """``clientCapabilities.fs``."""

    read_text_file: Annotated[StrictBool, SALVAGE] = False
    write_text_file: Annotated[StrictBool, SALVAGE] = False


class AuthCapabilities(WireModel):
    """``clientCapabilities.auth``: ``terminal`` allows ``type:"terminal"`` auth methods."""

    terminal: Annotated[StrictBool, SALVAGE] = False


class ElicitationCapabilities(WireModel):
    """``clientCapabilities.elicitation``; ``{}`` at this level advertises nothing."""

    form: Annotated[Capability | None, SALVAGE] = None
    url: Annotated[Capability | None, SALVAGE] = None


class ConfigOptionsCapabilities(WireModel):
    """``clientCapabilities.session.configOptions``."""

    boolean: Annotated[Capability | None, SALVAGE] = None


class ClientSessionCapabilities(WireModel):
    """``clientCapabilities.session``."""

    config_options: Annotated[ConfigOptionsCapabilities | None, SALVAGE] = None


class ClientCapabilities(WireModel):
    """What the client (editor, or the bridge facing an agent) supports."""

    fs: Annotated[FileSystemCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(FileSystemCapabilities)
    )
    terminal: Annotated[StrictBool, SALVAGE] = False
    auth: Annotated[AuthCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(AuthCapabilities)
    )
    elicitation: Annotated[ElicitationCapabilities | None, SALVAGE] = None
    session: Annotated[ClientSessionCapabilities | None, SALVAGE] = None


# --- agent capabilities -------------------------------------------------------------------------


class PromptCapabilities(WireModel):
    """Content block types beyond text and ``resource_link`` that the agent accepts in prompts."""

    image: Annotated[StrictBool, SALVAGE] = False
    audio: Annotated[StrictBool, SALVAGE] = False
    embedded_context: Annotated[StrictBool, SALVAGE] = False


class McpCapabilities(WireModel):
    """MCP transports the agent accepts besides stdio (which is mandatory)."""

    http: Annotated[StrictBool, SALVAGE] = False
    sse: Annotated[StrictBool, SALVAGE] = False


class SessionCapabilities(WireModel):
    """Optional session methods; each is an object (supported) or absent/null (not)."""

    list: Annotated[Capability | None, SALVAGE] = None
    delete: Annotated[Capability | None, SALVAGE] = None
    additional_directories: Annotated[Capability | None, SALVAGE] = None
    resume: Annotated[Capability | None, SALVAGE] = None
    close: Annotated[Capability | None, SALVAGE] = None
    fork: Annotated[Capability | None, SALVAGE] = None  # unstable


class AgentAuthCapabilities(WireModel):
    """``agentCapabilities.auth``."""

    logout: Annotated[Capability | None, SALVAGE] = None


class AgentCapabilities(WireModel):
    """What the agent supports; the bridge caches this per connection and gates calls on it."""

    load_session: Annotated[StrictBool, SALVAGE] = False
    prompt_capabilities: Annotated[PromptCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(PromptCapabilities)
    )
    mcp_capabilities: Annotated[McpCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(McpCapabilities)
    )
    session_capabilities: Annotated[SessionCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(SessionCapabilities)
    )
    auth: Annotated[AgentAuthCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(AgentAuthCapabilities)
    )

    def supports_load(self) -> bool:
        """``session/load`` is available (the agent replays history)."""
        return self.load_session

    def supports_resume(self) -> bool:
        """``session/resume`` is available (restore without replay)."""
        return _has(self.session_capabilities.resume)

    def supports_list(self) -> bool:
        return _has(self.session_capabilities.list)

    def supports_delete(self) -> bool:
        return _has(self.session_capabilities.delete)

    def supports_close(self) -> bool:
        return _has(self.session_capabilities.close)

    def supports_fork(self) -> bool:
        """``session/fork`` (unstable) is available."""
        return _has(self.session_capabilities.fork)

    def supports_additional_directories(self) -> bool:
        return _has(self.session_capabilities.additional_directories)

    def supports_logout(self) -> bool:
        return _has(self.auth.logout)


# --- auth methods -------------------------------------------------------------------------------


class AgentAuthMethod(WireModel):
    """``{id, name, description?}``: the default type, driven by ``authenticate``."""

    type: Literal["agent"] | None = None
    id: str
    name: str
    description: Annotated[str | None, SALVAGE] = None


class TerminalAuthMethod(WireModel):
    """``{type:"terminal", id, name, args?, env?}``: re-run the agent interactively, then
    reconnect and re-initialize. Never send ``authenticate`` for it."""

    type: Literal["terminal"] = "terminal"
    id: str
    name: str
    description: Annotated[str | None, SALVAGE] = None
    args: Annotated[list[str] | None, SALVAGE] = None
    env: Annotated[dict[str, str] | None, SALVAGE] = None


class UnknownAuthMethod(WireModel):
    """An auth method of a type this version does not know; all fields are kept."""

    type: str
    id: str
    name: str | None = None


AuthMethod = Annotated[
    Annotated[AgentAuthMethod, Tag("agent")]
    | Annotated[TerminalAuthMethod, Tag("terminal")]
    | Annotated[UnknownAuthMethod, Tag(UNKNOWN_TAG)],
    tag_discriminator("type", "type", ("agent", "terminal"), missing="agent"),
]


# --- initialize / authenticate ------------------------------------------------------------------


class InitializeRequest(WireModel):
    """``initialize`` params (client → agent)."""

    protocol_version: int = Field(ge=0, le=65535)
    client_capabilities: Annotated[ClientCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(ClientCapabilities)
    )
    client_info: Annotated[Implementation | None, SALVAGE] = None

    @field_validator("protocol_version", mode="before")
    @classmethod
    def _legacy_version_is_zero(cls, value: Any) -> Any:
        # Old clients (e.g. Zed) sent a date string such as "2024-11-05". The Rust types read any
        # such string as version 0, the unsupported pre-release; we answer with our own version.
        if isinstance(value, str):
            return int(value) if value.isdigit() else 0
        return value


class InitializeResponse(WireModel):
    """``initialize`` result (agent → client)."""

    protocol_version: int = Field(ge=0, le=65535)
    agent_capabilities: Annotated[AgentCapabilities, SALVAGE] = Field(
        default_factory=_all_defaults(AgentCapabilities)
    )
    # Not default_factory=list: pydantic inspects the factory's signature, and the signature of a
    # builtin is parsed from text, which compiles tokenize's regexes (~3 ms of a one-shot run).
    auth_methods: Annotated[list[AuthMethod], SKIP_INVALID, SALVAGE] = Field(
        default_factory=lambda: []
    )
    agent_info: Annotated[Implementation | None, SALVAGE] = None

    def needs_authentication(self) -> bool:
        """The agent listed auth methods, so requests may fail with ``auth_required``."""
        return bool(self.auth_methods)


class AuthenticateRequest(WireModel):
    """``authenticate`` params: ``{methodId}``; the result is ``{}``."""

    method_id: str
