"""Typed ACP calls to one agent process, over a :class:`JsonRpcPeer`.

An :class:`AgentConnection` lives as long as one agent process. It knows the agent's answer to
``initialize`` and gates every optional call on the capabilities in it, so the bridge never
sends a method the agent did not advertise. Restarts, routing of updates and the client-side
handlers belong to the supervisor, which makes a new connection for each process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from acp_bridge.errors import (
    AuthRequiredError,
    ErrorCode,
    LocalProtocolError,
    ProtocolVersionError,
    RemoteProtocolError,
    RpcError,
)
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.wire.acp import (
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptAnswer,
    PromptResponse,
    ResumeSessionResponse,
    SetSessionConfigOptionResponse,
)
from acp_bridge.wire.base import WireModel
from acp_bridge.wire.initialize import (
    PROTOCOL_VERSION,
    AgentAuthMethod,
    AgentCapabilities,
    InitializeResponse,
    TerminalAuthMethod,
)

__all__ = ["AgentConnection"]

_Model = TypeVar("_Model", bound=WireModel)
_T = TypeVar("_T")

log = logging.getLogger(__name__)


class AgentConnection:
    """ACP requests to one agent process. The caller owns every deadline."""

    def __init__(self, peer: JsonRpcPeer, *, name: str) -> None:
        self.peer = peer
        self.name = name
        self._init: InitializeResponse | None = None

    @property
    def init(self) -> InitializeResponse:
        if self._init is None:
            raise LocalProtocolError(f"{self.name}: initialize has not completed")
        return self._init

    @property
    def capabilities(self) -> AgentCapabilities:
        return self.init.agent_capabilities

    async def initialize(
        self, client_capabilities: dict[str, Any], client_info: dict[str, Any]
    ) -> InitializeResponse:
        """Negotiate protocol version 1 and cache the agent's capabilities.

        Raises:
            ProtocolVersionError: the agent answered with a version we do not speak.
            RemoteProtocolError: the answer is not an initialize result.
        """
        raw = await self.peer.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": client_capabilities,
                "clientInfo": client_info,
            },
        )
        try:
            init = InitializeResponse.parse(raw)
        except ValueError as exc:
            raise RemoteProtocolError(f"{self.name} sent a malformed initialize result") from exc
        if init.protocol_version != PROTOCOL_VERSION:
            raise ProtocolVersionError(
                f"{self.name} speaks ACP protocol version {init.protocol_version}; acp-bridge "
                f"speaks version {PROTOCOL_VERSION}. Use an agent release that supports "
                f"version {PROTOCOL_VERSION}.",
                agent_version=init.protocol_version,
            )
        self._init = init
        return init

    async def authenticate(self, method_id: str) -> None:
        methods = {method.id: method for method in self.init.auth_methods if _method_id(method)}
        method = methods.get(method_id)
        if method is None and methods:  # with none listed, the agent may still know it
            offered = ", ".join(f"{m.id} ({m.name or m.id})" for m in methods.values())
            raise LocalProtocolError(
                f"{self.name} offers no auth method {method_id!r}; it offers {offered}"
            )
        if isinstance(method, TerminalAuthMethod):
            raise LocalProtocolError(
                f"{self.name}: auth method {method_id!r} is a terminal login; run the agent "
                "interactively with its args to log in, then start the bridge again"
            )
        await self.peer.request("authenticate", {"methodId": method_id})

    # -- sessions ---------------------------------------------------------------------------

    async def new_session(
        self,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]],
        additional_directories: Sequence[Path],
    ) -> NewSessionResponse:
        params = self._session_params(cwd, mcp_servers, additional_directories)
        raw = await self._call_with_auth("session/new", params)
        return self._parse(NewSessionResponse, raw, "session/new")

    async def load_session(
        self,
        session_id: str,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]],
        additional_directories: Sequence[Path],
    ) -> LoadSessionResponse:
        """``session/load``: the agent replays the history as updates before it answers."""
        self._require(self.capabilities.supports_load(), "session/load")
        params = {"sessionId": session_id}
        params.update(self._session_params(cwd, mcp_servers, additional_directories))
        raw = await self._call_with_auth("session/load", params)
        return self._parse(LoadSessionResponse, raw, "session/load")

    async def resume_session(
        self,
        session_id: str,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]],
        additional_directories: Sequence[Path],
    ) -> ResumeSessionResponse:
        """``session/resume``: restore without replay."""
        self._require(self.capabilities.supports_resume(), "session/resume")
        params = {"sessionId": session_id}
        params.update(self._session_params(cwd, mcp_servers, additional_directories))
        raw = await self._call_with_auth("session/resume", params)
        return self._parse(ResumeSessionResponse, raw, "session/resume")

    async def list_sessions(
        self, cwd: Path | None = None, cursor: str | None = None
    ) -> ListSessionsResponse:
        self._require(self.capabilities.supports_list(), "session/list")
        params: dict[str, Any] = {}
        if cwd is not None:
            params["cwd"] = str(cwd)
        if cursor is not None:
            params["cursor"] = cursor
        raw = await self._call_with_auth("session/list", params)
        return self._parse(ListSessionsResponse, raw, "session/list")

    async def close_session(self, session_id: str) -> None:
        self._require(self.capabilities.supports_close(), "session/close")
        await self.peer.request("session/close", {"sessionId": session_id})

    async def set_config_option(
        self, session_id: str, config_id: str, value: str | bool
    ) -> SetSessionConfigOptionResponse:
        params: dict[str, Any] = {"sessionId": session_id, "configId": config_id, "value": value}
        if isinstance(value, bool):
            params["type"] = "boolean"
        raw = await self.peer.request("session/set_config_option", params)
        return self._parse(SetSessionConfigOptionResponse, raw, "session/set_config_option")

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        await self.peer.request("session/set_mode", {"sessionId": session_id, "modeId": mode_id})

    # -- turns ------------------------------------------------------------------------------

    async def prompt(
        self,
        session_id: str,
        blocks: Sequence[dict[str, Any]],
        *,
        on_answer: Callable[[], None] | None = None,
    ) -> PromptResponse:
        """``session/prompt``; ``on_answer`` runs the moment the answer is read (see
        :meth:`JsonRpcPeer.request`), so updates sent after it are never part of the turn."""
        raw = await self.peer.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": list(blocks)},
            on_answer=on_answer,
        )
        return self._parse(PromptResponse, raw, "session/prompt")

    async def start_prompt(
        self,
        session_id: str,
        blocks: Sequence[dict[str, Any]],
        on_settled: Callable[[Callable[[], PromptAnswer]], None],
    ) -> None:
        """``session/prompt`` without a waiting task: ``on_settled(outcome)`` runs in the reader
        the moment the answer is read (updates sent after it are never part of the turn);
        ``outcome()`` returns the answer (its stop reason checked, the rest validated on first
        use: see :class:`PromptAnswer`) or raises (see :meth:`JsonRpcPeer.start_request`)."""

        def settled(outcome: Callable[[], Any]) -> None:
            def parsed() -> PromptAnswer:
                try:
                    return self._read(PromptAnswer.read, outcome(), "session/prompt")
                except RpcError as exc:
                    # e.g. a token that expired mid-conversation: no retry can fix this turn
                    if exc.code == ErrorCode.AUTH_REQUIRED:
                        raise self.auth_required("session/prompt", exc) from exc
                    raise

            on_settled(parsed)

        await self.peer.start_request(
            "session/prompt", {"sessionId": session_id, "prompt": list(blocks)}, settled
        )

    async def cancel(self, session_id: str, *, timeout_s: float) -> bool:
        """``session/cancel`` (a notification): True once it reached the agent's stdin, False
        when it could not be written within ``timeout_s`` (an agent that stopped reading)."""
        return await self.peer.notify_within(
            "session/cancel", {"sessionId": session_id}, timeout_s
        )

    # -- helpers ----------------------------------------------------------------------------

    def _session_params(
        self,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]],
        additional_directories: Sequence[Path],
    ) -> dict[str, Any]:
        if not cwd.is_absolute():
            raise LocalProtocolError(f"the session cwd must be an absolute path, not {cwd}")
        params: dict[str, Any] = {"cwd": str(cwd), "mcpServers": list(mcp_servers)}
        if additional_directories:
            self._require(
                self.capabilities.supports_additional_directories(), "additionalDirectories"
            )
            params["additionalDirectories"] = [str(path) for path in additional_directories]
        return params

    def _require(self, supported: bool, what: str) -> None:
        if not supported:
            raise LocalProtocolError(f"{self.name} does not support {what}")

    async def _call_with_auth(self, method: str, params: dict[str, Any]) -> Any:
        try:
            return await self.peer.request(method, params)
        except RpcError as exc:
            if exc.code != ErrorCode.AUTH_REQUIRED:
                raise
            raise self.auth_required(method, exc) from exc

    def auth_required(self, method: str, exc: RpcError) -> AuthRequiredError:
        """The agent answered ``method`` with -32000: what it said and the auth methods it
        listed in ``initialize``."""
        methods = [
            (m.id, m.name or m.id, getattr(m, "description", None) or "")
            for m in self.init.auth_methods
            if _method_id(m)
        ]
        # Front-end neutral: a CLI user reads this too (the failed turn's error), so it names
        # no option of the library; each front-end says how to pick a method (``methods``).
        listed = ", ".join(f"{mid} ({name})" for mid, name, _ in methods)
        offered = f" (auth methods: {listed})" if listed else ""
        return AuthRequiredError(
            f"{self.name} requires authentication before {method}: {exc.message}{offered}",
            methods=methods,
            agent_message=exc.message,
        )

    def _parse(self, model: type[_Model], raw: Any, method: str) -> _Model:
        return self._read(model.parse, raw, method)

    def _read(self, read: Callable[[Any], _T], raw: Any, method: str) -> _T:
        try:
            return read(raw)
        except ValueError as exc:
            raise RemoteProtocolError(f"{self.name} sent a malformed {method} result") from exc


def _method_id(method: Any) -> bool:
    return isinstance(method, AgentAuthMethod | TerminalAuthMethod)
