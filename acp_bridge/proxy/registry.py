"""What the proxy must remember to restore the editor's sessions after a restart. Pure.

The editor's ``initialize`` and ``authenticate`` params are replayed to every new agent
process; every session the editor opened (new), loaded or resumed is kept with its cwd,
mcpServers and additionalDirectories, and restored by ``session/load`` when the agent can
load (its replay is swallowed), else by ``session/resume``. The mode and config options the
editor chose for a session (``session/set_mode``, ``session/set_config_option``, the last
value of each) are applied again after it is restored: a new process starts from defaults.
A session that cannot be restored is *lost*: the editor's next request naming it gets an error
saying so and why.

Bound: ``max_sessions`` sessions (the oldest are forgotten first; a forgotten session is not
restored after a restart and the agent answers for it as it likes). Sessions the editor closed
or deleted are forgotten at once.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["SETTINGS_METHODS", "EditorSessions", "RestoreStep", "SessionRecord"]

MAX_SESSIONS = 1024
SETTINGS_METHODS = frozenset({"session/set_mode", "session/set_config_option"})
MAX_LOST = 1024


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    cwd: Any
    mcp_servers: Any
    additional_directories: Any
    """None when the editor did not send them (then they are not sent on restore either)."""

    def restore_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "sessionId": self.session_id,
            "cwd": self.cwd,
            "mcpServers": self.mcp_servers if self.mcp_servers is not None else [],
        }
        if self.additional_directories is not None:
            params["additionalDirectories"] = self.additional_directories
        return params


@dataclass(frozen=True, slots=True)
class RestoreStep:
    record: SessionRecord
    methods: tuple[str, ...]
    """What to try, in order; empty when the agent can neither load nor resume."""
    settings: tuple[tuple[str, dict[str, Any]], ...] = ()
    """The editor's choices to apply again once restored: (method, params), in order."""


class EditorSessions:
    """The editor's sessions as the proxy must remember them to restore them (the library's
    open sessions are :class:`~acp_bridge.client.session_registry.SessionRegistry`'s)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.initialize_params: dict[str, Any] | None = None
        self.authenticate_params: dict[str, Any] | None = None
        self.can_load = False
        self.can_resume = False
        self._sessions: OrderedDict[str, SessionRecord] = OrderedDict()
        self._lost: OrderedDict[str, str] = OrderedDict()
        self._settings: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        self._max = max_sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def answered(
        self, method: str, params: dict[str, Any], session_id: str | None, result: Any
    ) -> None:
        """The agent accepted one of the editor's requests: remember what a restore needs."""
        if method == "initialize":
            self.initialized(params, result)
        elif method == "authenticate":
            self.authenticate_params = params
        elif method in ("session/new", "session/fork"):  # fork (unstable): a new id too
            new_id = result.get("sessionId") if isinstance(result, dict) else None
            if isinstance(new_id, str):
                self.opened(new_id, params)
        elif method in ("session/load", "session/resume") and session_id is not None:
            self.opened(session_id, params)
        elif method in ("session/close", "session/delete") and session_id is not None:
            self.forget(session_id)
        elif method in SETTINGS_METHODS and session_id is not None and session_id in self:
            # One entry per setting (the mode, each config option): the last choice wins.
            key = "mode" if method == "session/set_mode" else f"config:{params.get('configId')}"
            chosen = self._settings.setdefault(session_id, {})
            chosen.pop(key, None)
            chosen[key] = (method, params)

    def initialized(self, params: dict[str, Any], result: Any) -> None:
        """The agent answered the editor's (or our own) ``initialize``."""
        self.initialize_params = params
        capabilities = result.get("agentCapabilities") if isinstance(result, dict) else None
        capabilities = capabilities if isinstance(capabilities, dict) else {}
        self.can_load = capabilities.get("loadSession") is True
        session_caps = capabilities.get("sessionCapabilities")
        resume = session_caps.get("resume") if isinstance(session_caps, dict) else None
        self.can_resume = isinstance(resume, dict)

    def opened(self, session_id: str, params: dict[str, Any]) -> None:
        """The agent accepted the editor's session/new, load or resume."""
        self._lost.pop(session_id, None)
        self._sessions.pop(session_id, None)
        self._sessions[session_id] = SessionRecord(
            session_id,
            params.get("cwd"),
            params.get("mcpServers"),
            params.get("additionalDirectories"),
        )
        while len(self._sessions) > self._max:
            forgotten, _record = self._sessions.popitem(last=False)
            self._settings.pop(forgotten, None)

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        self._lost.pop(session_id, None)
        self._settings.pop(session_id, None)

    def plan(self) -> list[RestoreStep]:
        methods = tuple(
            name
            for name, able in (("session/load", self.can_load), ("session/resume", self.can_resume))
            if able
        )
        return [
            RestoreStep(record, methods, tuple(self._settings.get(record.session_id, {}).values()))
            for record in self._sessions.values()
        ]

    def mark_lost(self, session_id: str, why: str) -> None:
        self._sessions.pop(session_id, None)
        self._settings.pop(session_id, None)
        self._lost[session_id] = why
        while len(self._lost) > MAX_LOST:
            self._lost.popitem(last=False)

    def lost_reason(self, session_id: str | None) -> str | None:
        return None if session_id is None else self._lost.get(session_id)
