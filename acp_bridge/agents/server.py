"""The reference agent's ACP methods, served on acp-bridge's own :class:`JsonRpcPeer`.

``initialize`` advertises ``loadSession`` and the ``list``, ``resume`` and ``close`` session
capabilities. Sessions are created by ``session/new`` and restored from the history store by
``session/load`` (which first replays the history as ``session/update`` notifications) or
``session/resume`` (no replay); ``session/prompt`` runs a turn (:mod:`.turn`), one at a time per
session; ``session/cancel`` cancels it. Mode and model are chosen with ``session/set_mode`` or
``session/set_config_option`` and stored with the session.

:func:`serve` runs it on stdin and the claimed stdout (see
:func:`acp_bridge.cli.agent_cmd.claim_stdout`), answers at once while litellm is imported
in the background, and returns when stdin ends.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any, Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from acp_bridge.agents.config import AgentConfig
from acp_bridge.agents.mock_script import MockScript
from acp_bridge.agents.model import ModelClient
from acp_bridge.agents.prompt import PROMPT_CAPABILITIES, check_prompt
from acp_bridge.agents.runtime import LiteLLM
from acp_bridge.agents.sessions import AgentSession
from acp_bridge.agents.store import HistoryStore
from acp_bridge.agents.tools import MODES
from acp_bridge.agents.turn import TurnDeps, run_turn
from acp_bridge.errors import RpcError
from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream
from acp_bridge.rpc.peer import JsonRpcPeer
from acp_bridge.safe_files import read_regular
from acp_bridge.version import __version__
from acp_bridge.wire.acp import (
    CancelNotification,
    CloseSessionRequest,
    ListSessionsRequest,
    LoadSessionRequest,
    NewSessionRequest,
    PromptRequest,
    ResumeSessionRequest,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
)
from acp_bridge.wire.initialize import ClientCapabilities, InitializeRequest

__all__ = ["ReferenceAgent", "serve"]

log = logging.getLogger(__name__)

PROTOCOL_VERSION: Final = 1
AGENT_NAME: Final = "acp-bridge-agent"


class ReferenceAgent:
    def __init__(self, peer: JsonRpcPeer, config: AgentConfig, store: HistoryStore) -> None:
        self.peer = peer
        self.config = config
        self.store = store
        self.litellm = LiteLLM(self._configure_litellm)
        self.models = ModelClient(self.litellm, config)
        self.capabilities = ClientCapabilities()
        self.sessions: dict[str, AgentSession] = {}
        # Prompts read off the wire whose handler has not started yet, per session id, and the
        # sessions whose cancel came in that gap (the reader handles a notification before a
        # request's task runs, so a quick cancel could otherwise find no turn and be lost).
        self._arriving: dict[str, int] = {}
        self._cancel_early: set[str] = set()
        peer.add_observer(self._note_prompt)
        self._script: MockScript | None = None
        if config.mock_script is not None:
            text = read_regular(str(config.mock_script)).decode("utf-8")  # never a FIFO
            self._script = MockScript.parse(text)
        for method, handler in {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/resume": self.resume_session,
            "session/list": self.list_sessions,
            "session/close": self.close_session,
            "session/prompt": self.prompt,
            "session/set_mode": self.set_mode,
            "session/set_config_option": self.set_config_option,
        }.items():
            peer.on_request(method, handler)
        peer.on_notification("session/cancel", self.cancel)

    def _configure_litellm(self, litellm: Any) -> None:
        if self._script is not None:
            from acp_bridge.agents.mock_provider import register

            register(litellm, self._script)

    # -- connection -----------------------------------------------------------------------

    async def initialize(self, params: Any) -> dict[str, Any]:
        request = InitializeRequest.parse(params)
        self.capabilities = request.client_capabilities
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": dict(PROMPT_CAPABILITIES),
                "sessionCapabilities": {
                    "list": {},
                    "resume": {},
                    "close": {},
                    "additionalDirectories": {},
                },
            },
            "authMethods": [],
            "agentInfo": {"name": AGENT_NAME, "title": "acp-bridge agent", "version": __version__},
        }

    async def authenticate(self, params: Any) -> dict[str, Any]:
        return {}  # keys come from the environment (see docs/agent.md)

    # -- sessions -------------------------------------------------------------------------

    async def new_session(self, params: Any) -> dict[str, Any]:
        request = NewSessionRequest.parse(params)
        _check_cwd(request.cwd)
        session = AgentSession(
            uuid.uuid4().hex,
            request.cwd,
            self.config.default_mode,
            self.config.model,
            additional_directories=_directories(request.additional_directories),
        )
        self.store.create(session.id, session.cwd, session.mode, session.model)
        self.sessions[session.id] = session
        return {"sessionId": session.id, **session.setup(self.config.model_choices)}

    async def load_session(self, params: Any) -> dict[str, Any]:
        request = LoadSessionRequest.parse(params)
        session = self._restore(request.session_id, request.cwd, request.additional_directories)
        for update in self.store.entries(session.id, "update"):
            await self.notify(session.id, update)
        return session.setup(self.config.model_choices)

    async def resume_session(self, params: Any) -> dict[str, Any]:
        request = ResumeSessionRequest.parse(params)
        session = self._restore(request.session_id, request.cwd, request.additional_directories)
        return session.setup(self.config.model_choices)

    def _restore(
        self, session_id: str, cwd: str, additional_directories: list[str] | None
    ) -> AgentSession:
        directories = _directories(additional_directories)
        live = self.sessions.get(session_id)
        if live is not None and live.turn is not None:
            raise RpcError.invalid_request("the session has a prompt turn running")
        stored = self.store.get(session_id)
        if stored is None:
            raise RpcError.resource_not_found(f"session:{session_id}")
        if os.path.normpath(stored.cwd) != os.path.normpath(cwd):
            raise RpcError.invalid_params(
                f"session {session_id} belongs to {stored.cwd}, not {cwd}"
            )
        session = AgentSession(
            stored.id,
            stored.cwd,
            stored.mode,
            stored.model,
            cost=stored.cost,
            additional_directories=directories,
        )
        session.messages = self.store.entries(session_id, "message")
        self.sessions[session_id] = session
        return session

    async def list_sessions(self, params: Any) -> dict[str, Any]:
        request = ListSessionsRequest.parse(params or {})
        stored, cursor = self.store.list(request.cwd, request.cursor)
        result: dict[str, Any] = {
            "sessions": [
                {
                    "sessionId": s.id,
                    "cwd": s.cwd,
                    **({"title": s.title} if s.title else {}),
                    "updatedAt": _iso(s.updated),
                }
                for s in stored
            ]
        }
        if cursor is not None:
            result["nextCursor"] = cursor
        return result

    async def close_session(self, params: Any) -> dict[str, Any]:
        request = CloseSessionRequest.parse(params)
        session = self.sessions.pop(request.session_id, None)
        if session is not None and session.turn is not None:
            session.turn.cancel()
        return {}

    def _session(self, session_id: str) -> AgentSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise RpcError.resource_not_found(f"session:{session_id}")
        return session

    # -- turns ----------------------------------------------------------------------------

    def _note_prompt(self, direction: str, line: bytes) -> None:
        if direction != "in" or b'"session/prompt"' not in line:
            return
        try:
            message = json.loads(line)
            session_id = message["params"]["sessionId"]
        except (ValueError, KeyError, TypeError):
            return
        if message.get("method") == "session/prompt" and isinstance(session_id, str):
            self._arriving[session_id] = self._arriving.get(session_id, 0) + 1

    def _started_prompt(self, params: Any) -> bool:
        """Count a prompt's handler as started; True if a cancel came while it was arriving."""
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(session_id, str) or session_id not in self._arriving:
            return False
        self._arriving[session_id] -= 1
        if self._arriving[session_id] <= 0:
            del self._arriving[session_id]
            if session_id in self._cancel_early:
                self._cancel_early.discard(session_id)
                return True
        return False

    async def prompt(self, params: Any) -> dict[str, Any]:
        cancelled_early = self._started_prompt(params)
        blocks = params.get("prompt") if isinstance(params, dict) else None
        if isinstance(blocks, list):
            check_prompt(blocks)  # before parsing copies it, storing keeps it, a model bills it
        request = PromptRequest.parse(params)
        session = self._session(request.session_id)
        if session.turn is not None:
            raise RpcError.invalid_request("a prompt turn is already running in this session")
        deps = TurnDeps(
            self.config,
            self.store,
            self.models,
            self.capabilities,
            self.peer.request,
            self.notify,
        )
        blocks = [block.dump() for block in request.prompt]
        return await run_turn(deps, session, blocks, cancelled=cancelled_early)

    def cancel(self, params: Any) -> None:
        try:
            request = CancelNotification.parse(params)
        except ValueError:
            return
        session = self.sessions.get(request.session_id)
        if session is not None and session.turn is not None:
            session.turn.cancel()
        elif self._arriving.get(request.session_id):
            self._cancel_early.add(request.session_id)

    async def notify(self, session_id: str, update: dict[str, Any]) -> None:
        await self.peer.notify("session/update", {"sessionId": session_id, "update": update})

    # -- choices --------------------------------------------------------------------------

    async def set_mode(self, params: Any) -> dict[str, Any]:
        request = SetSessionModeRequest.parse(params)
        session = self._session(request.session_id)
        self._choose(session, "mode", request.mode_id)
        return {}

    async def set_config_option(self, params: Any) -> dict[str, Any]:
        request = SetSessionConfigOptionRequest.parse(params)
        session = self._session(request.session_id)
        if not isinstance(request.value, str):
            raise RpcError.invalid_params(f"{request.config_id} takes a string value")
        self._choose(session, request.config_id, request.value)
        return {"configOptions": session.config_options(self.config.model_choices)}

    def _choose(self, session: AgentSession, config_id: str, value: str) -> None:
        if config_id == "mode":
            if value not in MODES:
                raise RpcError.invalid_params(f"unknown mode {value!r}; modes: {sorted(MODES)}")
            session.mode = value
            self.store.update(session.id, mode=value)
        elif config_id == "model":
            if value not in self.config.model_choices and value != session.model:
                raise RpcError.invalid_params(
                    f"unknown model {value!r}; choices: {list(self.config.model_choices)}"
                )
            session.model = value
            self.store.update(session.id, model=value)
        else:
            raise RpcError.invalid_params(f"unknown config option {config_id!r}")


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RpcError.invalid_params(f"cwd must be an absolute path, not {cwd!r}")


def _directories(paths: list[str] | None) -> tuple[str, ...]:
    """``additionalDirectories``: absolute paths, the session's roots beside its cwd."""
    for path in paths or ():
        if not os.path.isabs(path):
            raise RpcError.invalid_params(
                f"additionalDirectories must be absolute paths, not {path!r}"
            )
    return tuple(paths or ())


def _iso(timestamp: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat()


def serve(config: AgentConfig, frames_fd: int) -> int:
    """Serve ACP on stdin (fd 0) and ``frames_fd`` (the process's real stdout, claimed by the
    caller so nothing else can write there) until stdin ends. Returns the exit status."""
    receive = FdReceiveStream(0)
    send = FdSendStream(frames_fd, close_fd=True)
    anyio.run(_serve, config, receive, send, backend="asyncio")
    return 0


async def _serve(config: AgentConfig, receive: ByteReceiveStream, send: ByteSendStream) -> None:
    store = HistoryStore(Path(config.history_path))
    peer = JsonRpcPeer(receive, send, name="client")
    agent = ReferenceAgent(peer, config, store)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.litellm.load)
            await tg.start(peer.run)
            await peer.wait_closed()
            tg.cancel_scope.cancel()
    finally:
        store.close()
        await send.aclose()
        await receive.aclose()
