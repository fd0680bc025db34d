"""The sessions of one supervised agent: opening them on the agent, and the table that finds them.

:class:`SessionRegistry` keeps every open :class:`~acp_bridge.client.session.Session` by id (a
restore that had to open a new session re-keys it; the object stays). Opening a session goes
through the agent's ``call``, so it waits for a ready process and, cut short by the process's
death, raises the error describing it. Closing forgets the session first, then sends
``session/close`` to the running process if it supports it; a failure there is logged, never
raised. The table holds what the caller opened and did not close: its bound is the caller's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.session import Session, SessionHost
from acp_bridge.errors import ConnectionClosedError, ResourceClosedError, RpcError
from acp_bridge.wire.acp import SessionInfo

__all__ = ["SessionRegistry"]

log = logging.getLogger(__name__)

_Servers = Sequence[dict[str, Any]]
_Directories = Sequence[Path]


class SessionRegistry:
    """The open sessions of ``host``; ``connected`` is its current connection, if one is up."""

    def __init__(
        self,
        host: SessionHost,
        connected: Callable[[], AgentConnection | None],
        claim_commands: Callable[[Session], None] = lambda session: None,
    ) -> None:
        self._host = host
        self._connected = connected
        self._claim_commands = claim_commands  # slash commands that came before the session
        self._sessions: dict[str, Session] = {}

    @property
    def all(self) -> list[Session]:
        return list(self._sessions.values())

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    async def new(self, cwd: Path, mcp_servers: _Servers, directories: _Directories) -> Session:
        response = await self._host.call(AgentConnection.new_session, cwd, mcp_servers, directories)
        session = Session(self._host, response.session_id, cwd, mcp_servers, directories)
        session.offer(response.modes, response.config_options)
        self._sessions[session.id] = session
        self._claim_commands(session)
        return session

    async def listed(self, cwd: Path | None) -> list[SessionInfo]:
        """Every session the agent knows (all pages), optionally only those in ``cwd``."""
        sessions: list[SessionInfo] = []
        cursor: str | None = None
        while True:
            page = await self._host.call(AgentConnection.list_sessions, cwd, cursor)
            sessions.extend(page.sessions)
            cursor = page.next_cursor
            if not cursor:
                return sessions

    async def load(
        self, session_id: str, cwd: Path, mcp_servers: _Servers, directories: _Directories
    ) -> Session:
        """Open an existing session; its replayed past is in ``Session.history``."""
        session = Session(self._host, session_id, cwd, mcp_servers, directories)
        session.replay = []
        self._sessions[session_id] = session
        try:
            response = await self._host.call(
                AgentConnection.load_session, session_id, cwd, mcp_servers, directories
            )
            session.offer(response.modes, response.config_options)
        except BaseException:
            del self._sessions[session_id]
            raise
        finally:
            session.history, session.replay = session.replay or [], None
        return session

    async def resume(
        self, session_id: str, cwd: Path, mcp_servers: _Servers, directories: _Directories
    ) -> Session:
        """Reattach to an existing session without a replay."""
        response = await self._host.call(
            AgentConnection.resume_session, session_id, cwd, mcp_servers, directories
        )
        session = Session(self._host, session_id, cwd, mcp_servers, directories)
        session.offer(response.modes, response.config_options)
        self._sessions[session_id] = session
        self._claim_commands(session)
        return session

    def rename(self, session: Session, new_id: str) -> None:
        """A restore had to open a new session: re-key it (the Session object stays)."""
        self._sessions.pop(session.id, None)
        session.id = new_id
        self._sessions[new_id] = session

    async def close(self, session: Session) -> None:
        session.closed = True
        self._sessions.pop(session.id, None)
        connection = self._connected()
        if connection is not None and connection.capabilities.supports_close():
            try:
                await connection.close_session(session.id)
            except (RpcError, ConnectionClosedError, ResourceClosedError) as exc:
                log.info("%s: session/close for %s failed: %s", self._host.name, session.id, exc)
