"""What a supervised agent serves to its agent: updates, permissions, files, terminals.

:class:`ClientHandlers` is registered on the peer of every agent process. It routes each
``session/update`` to the session's replay (during a load), to its running turn, or to its
stray list (outside any turn), and answers the agent's requests through the options' policy and
the enabled capabilities. Capabilities that are off are neither advertised nor served (-32601;
an elicitation in a mode not advertised: -32602, as the protocol says).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from acp_bridge.client.events import PermissionDecided
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.session import Session
from acp_bridge.errors import RpcError
from acp_bridge.rpc.peer import JsonRpcPeer

if TYPE_CHECKING:
    from acp_bridge.client.terminal import TerminalManager

__all__ = ["ClientHandlers"]

_TERMINAL_METHODS = (
    "terminal/create",
    "terminal/output",
    "terminal/wait_for_exit",
    "terminal/kill",
    "terminal/release",
)

log = logging.getLogger(__name__)

_EARLY_COMMANDS_KEPT = 16
_INVALID_PARAMS = -32602


class ClientHandlers:
    """Serves the agent's requests; it sees sessions only through ``find_session``."""

    def __init__(
        self,
        agent_name: str,
        options: ClientOptions,
        find_session: Callable[[str], Session | None],
    ) -> None:
        self._name = agent_name
        self._options = options
        self._find_session = find_session
        self._early_commands: dict[str, list[dict[str, Any]]] = {}
        # fs and terminal support are imported only when offered (a one-shot offers neither).
        if options.allow_fs_read or options.allow_fs_write:
            from acp_bridge.client.fs import FileSystemAccess
        if options.allow_terminal:
            from acp_bridge.client.terminal import TerminalManager
        self._fs = (
            FileSystemAccess(
                self._roots, allow_read=options.allow_fs_read, allow_write=options.allow_fs_write
            )
            if options.allow_fs_read or options.allow_fs_write
            else None
        )
        self._terminals = (
            TerminalManager(self._cwd, base_env=options.base_env)
            if options.allow_terminal
            else None
        )

    def client_info(self) -> dict[str, Any]:
        options = self._options
        return {"name": options.client_name, "version": options.client_version}

    def client_capabilities(self) -> dict[str, Any]:
        options = self._options
        capabilities: dict[str, Any] = {
            "fs": {
                "readTextFile": options.allow_fs_read,
                "writeTextFile": options.allow_fs_write,
            },
            "terminal": options.allow_terminal,
        }
        if options.elicitation is not None:
            capabilities["elicitation"] = options.elicitation.capabilities()
        return capabilities

    async def start(self, task_group: TaskGroup) -> None:
        if self._terminals is not None:
            await task_group.start(self._terminals.run)

    async def aclose(self) -> None:
        if self._terminals is not None:
            await self._terminals.aclose()

    @property
    def terminals(self) -> TerminalManager | None:
        """The terminals served to the agent (None unless ``allow_terminal``)."""
        return self._terminals

    async def end_generation(self, generation: int) -> None:
        """Process ``generation`` is gone: its terminals die with it (bounded)."""
        if self._terminals is not None:
            await self._terminals.end_generation(generation)

    def register(self, peer: JsonRpcPeer, generation: int) -> None:
        peer.on_notification("session/update", self.on_update)
        peer.on_request("session/request_permission", self.on_permission)
        peer.on_request("elicitation/create", self.on_elicitation)
        peer.on_notification("elicitation/complete", self.on_elicitation_complete)
        fs = self._fs
        if fs is not None and fs.allow_read:
            peer.on_request("fs/read_text_file", fs.read_text_file)
        else:
            peer.on_request("fs/read_text_file", self._refuser("fs/read_text_file"))
        if fs is not None and fs.allow_write:
            peer.on_request("fs/write_text_file", fs.write_text_file)
        else:
            peer.on_request("fs/write_text_file", self._refuser("fs/write_text_file"))
        if self._terminals is not None:
            terminals = self._terminals.for_generation(generation)
            peer.on_request("terminal/create", terminals.create)
            peer.on_request("terminal/output", terminals.output)
            peer.on_request("terminal/wait_for_exit", terminals.wait_for_exit)
            peer.on_request("terminal/kill", terminals.kill)
            peer.on_request("terminal/release", terminals.release)
        else:
            for method in _TERMINAL_METHODS:
                peer.on_request(method, self._refuser(method))

    def _refuser(self, method: str) -> Callable[[Any], Awaitable[Any]]:
        """A capability that is off: -32601, as if unserved, and the caller is told."""

        async def refuse(params: Any) -> Any:
            if self._options.on_capability_refused is not None:
                self._options.on_capability_refused(method)
            raise RpcError.method_not_found(method)

        return refuse

    async def on_update(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        update = params.get("update")
        session_id = params.get("sessionId")
        session = self._find_session(session_id) if isinstance(session_id, str) else None
        if not isinstance(update, dict):
            return
        if update.get("sessionUpdate") == "available_commands_update":
            self._note_commands(session, session_id, update.get("availableCommands"))
        if session is None:
            log.debug("%s: update for an unknown session dropped", self._name)
            return
        session.updates_seen += 1
        if session.replay is not None:
            session.replay.append(update)
            return
        turn = session.current_turn
        if (
            turn is not None
            and not turn.is_closed  # closed by its answer (read just before) or by a quarantine
            and update.get("messageId") not in session.fenced_message_ids
        ):
            await turn.deliver_update(update)
        else:
            session.stray_updates.append(update)

    def _note_commands(self, session: Session | None, session_id: Any, commands: Any) -> None:
        """The agent's slash commands, kept whenever they come, in a turn or not. Agents send
        them right after answering ``session/new``, which can be read before the new session
        is in the table: kept for :meth:`claim_commands` then (the latest few ids only)."""
        listed = [c for c in commands if isinstance(c, dict)] if isinstance(commands, list) else []
        if session is not None:
            session.commands = listed
        elif isinstance(session_id, str):
            self._early_commands.pop(session_id, None)
            self._early_commands[session_id] = listed
            while len(self._early_commands) > _EARLY_COMMANDS_KEPT:
                del self._early_commands[next(iter(self._early_commands))]

    def claim_commands(self, session: Session) -> None:
        """A session just entered the table: its commands, if they came before it did."""
        listed = self._early_commands.pop(session.id, None)
        if listed is not None:
            session.commands = listed

    async def on_permission(self, params: Any) -> dict[str, Any]:
        # Imported here: the request models are not needed until an agent asks permission.
        from acp_bridge.wire.client_methods import (
            RequestPermissionRequest,
            RequestPermissionResponse,
        )

        request = RequestPermissionRequest.parse(params)  # malformed: the peer answers -32602
        session = self._find_session(request.session_id)
        policy = self._options.permission
        scope = anyio.CancelScope()
        if session is not None:
            session.permission_scopes.add(scope)
        try:
            with scope:
                response, record = await policy.decide_with_record(request)
        finally:
            if session is not None:
                session.permission_scopes.discard(scope)
        if scope.cancelled_caught:  # the turn was cancelled while we were deciding
            response, option_id, option_kind = RequestPermissionResponse.cancelled(), None, None
        else:
            option_id, option_kind = record.option_id, record.option_kind
        if session is not None and session.current_turn is not None:
            await session.current_turn.deliver_permission(
                PermissionDecided(
                    request.session_id,
                    request.tool_call.dump(),
                    option_id,
                    option_kind,
                    str(policy.mode),
                )
            )
        return response.dump()

    async def on_elicitation(self, params: Any) -> dict[str, Any]:
        """``elicitation/create``: the handler answers the modes it advertised; any other mode
        is -32602. Cancelling the turn answers ``cancel``."""
        from acp_bridge.wire.elicitation import ElicitationRequest, ElicitationResponse

        request = ElicitationRequest.parse(params)  # malformed: the peer answers -32602
        handler = self._options.elicitation
        if handler is None or not handler.answers(request.mode):
            if self._options.on_capability_refused is not None:
                self._options.on_capability_refused("elicitation/create")
            raise RpcError(
                _INVALID_PARAMS, f"elicitation mode {request.mode!r} is not supported here"
            )
        session = self._find_session(request.session_id) if request.session_id else None
        scope = anyio.CancelScope()
        if session is not None:
            session.permission_scopes.add(scope)  # cancelled with the turn, as a permission
        try:
            with scope:
                response = await handler.answer(request)
        finally:
            if session is not None:
                session.permission_scopes.discard(scope)
        if scope.cancelled_caught:
            response = ElicitationResponse.cancel()
        return response.dump()

    async def on_elicitation_complete(self, params: Any) -> None:
        handler = self._options.elicitation
        if handler is not None and handler.on_complete is not None and isinstance(params, dict):
            handler.on_complete(params)

    def _roots(self, session_id: str) -> list[Path] | None:
        session = self._find_session(session_id)
        return session.roots if session is not None else None

    def _cwd(self, session_id: str) -> Path | None:
        session = self._find_session(session_id)
        return session.cwd if session is not None else None
