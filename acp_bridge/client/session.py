"""A session of a supervised agent, as the caller holds it.

The :class:`Session` object outlives agent restarts: its ``id`` stays the same when the session
is restored (``session/load`` or ``session/resume``), and changes, with a ``SessionReplaced``
event, when the agent could only open a new one. It records what a restore needs (cwd, MCP
servers, additional directories, the config options and mode chosen).

At most one prompt is in flight per session: a second ``prompt()`` waits for the first turn to
end, in the order the calls were made.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.turn import Turn
from acp_bridge.errors import LocalProtocolError, ResourceClosedError
from acp_bridge.wire.acp import PromptResponse, SessionModeState
from acp_bridge.wire.base import WireModel

if TYPE_CHECKING:
    from acp_bridge.client.supervisor import SupervisedAgent

__all__ = ["Content", "Session", "to_blocks"]

log = logging.getLogger(__name__)

Content = str | Sequence[dict[str, Any] | WireModel]
"""A prompt: plain text, or ACP content blocks (dicts or wire models)."""

_STRAY_KEPT = 100


def to_blocks(content: Content) -> list[dict[str, Any]]:
    """ACP content blocks for a prompt."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block.dump() if isinstance(block, WireModel) else dict(block) for block in content]


class Session:
    """One ACP session. Obtain it from ``SupervisedAgent.new_session`` / ``load_session``."""

    def __init__(
        self,
        agent: SupervisedAgent,
        session_id: str,
        cwd: Path,
        mcp_servers: Sequence[dict[str, Any]],
        additional_directories: Sequence[Path],
    ) -> None:
        self._agent = agent
        self.id = session_id
        self.cwd = cwd
        self.mcp_servers = tuple(mcp_servers)
        self.additional_directories = tuple(additional_directories)
        self.config_choices: dict[str, str | bool] = {}
        self.mode_id: str | None = None
        self.modes: SessionModeState | None = None
        """The agent's modes for this session (legacy), as last reported."""
        self.config_options: list[Any] = []
        """The agent's config options for this session, as last reported (complete list)."""
        self.history: list[dict[str, Any]] = []
        """The updates replayed by the last ``session/load``: the past, never new output."""
        self.stray_updates: deque[dict[str, Any]] = deque(maxlen=_STRAY_KEPT)
        """Updates that arrived outside any turn (late ones, or live ones after a load)."""
        self.closed = False
        self.updates_seen = 0
        """Updates received for this session, in a turn or not (a counter is cheaper than a
        clock read per update; the driver's settle window watches it)."""
        self.fenced_message_ids: frozenset[str] = frozenset()
        """messageIds of the previous turn: an update carrying one is late, never the next
        turn's."""
        self._turn: Turn | None = None
        self._turn_lock = anyio.Lock()
        self.replay: list[dict[str, Any]] | None = None
        self.permission_scopes: set[anyio.CancelScope] = set()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("prompting" if self._turn else "idle")
        return f"<Session {self.id!r} [{state}] cwd={str(self.cwd)!r}>"

    @property
    def roots(self) -> list[Path]:
        """Where the agent may read and write files: the cwd and the additional directories."""
        return [self.cwd, *self.additional_directories]

    @property
    def current_turn(self) -> Turn | None:
        return self._turn

    # -- turns ------------------------------------------------------------------------------

    @asynccontextmanager
    async def prompt(self, content: Content) -> AsyncIterator[Turn]:
        """Start a turn; iterate the yielded :class:`Turn` for its events.

        Leaving the block before the turn ended cancels it: the agent gets ``cancel_grace_s``
        to answer, after which it is quarantined (killed, restarted, the session restored).

        Raises:
            RestartLimitError: the agent is gone for good.
        """
        turn = await self.begin(content)
        try:
            yield turn
        finally:
            await self.end(turn)

    async def begin(self, content: Content) -> Turn:
        """Start a turn (waiting for this session's previous turn); pair with :meth:`end`.

        Raises:
            RestartLimitError: the agent is gone for good.
        """
        blocks = to_blocks(content)
        await self._turn_lock.acquire()
        try:
            self._check_open()
            turn = Turn(self.id, buffer=self._agent.options.turn_buffer)
            try:
                await self._agent.start_turn(self, turn, blocks)
            except BaseException:
                turn.discard()
                raise
        except BaseException:
            self._turn_lock.release()
            raise
        self._turn = turn
        return turn

    async def end(self, turn: Turn) -> None:
        """Finish with ``turn``. One the agent has not answered yet is cancelled; an agent that
        does not answer within ``cancel_grace_s`` is quarantined. Bounded; never raises."""
        try:
            with anyio.CancelScope(shield=True):
                if not turn.is_done:
                    await self._agent.cancel_turn(self)
                    with anyio.move_on_after(self._agent.options.cancel_grace_s):
                        await turn.wait_quietly()
                if not turn.is_done:
                    grace = self._agent.options.cancel_grace_s
                    await self._agent.quarantine(
                        f"it did not answer a cancelled prompt within {grace:g} s"
                    )
                    with anyio.move_on_after(self._agent.options.quarantine_wait_s):
                        await turn.wait_quietly()
                turn.close()
                self.fenced_message_ids = turn.message_ids
        finally:
            self._turn = None
            self._turn_lock.release()

    async def run(self, content: Content) -> PromptResponse:
        """Prompt and wait for the end, ignoring the events."""
        async with self.prompt(content) as turn:
            return await turn.wait()

    async def cancel(self) -> None:
        """Cancel the running turn (``session/cancel``); pending permission requests are answered
        ``cancelled``. The turn ends when the agent answers; a no-op when nothing runs."""
        if self._turn is not None and not self._turn.is_done:
            await self._agent.cancel_turn(self)

    async def quarantine(self, reason: str) -> None:
        """Kill the agent's process tree and restart it; the session is restored before the
        next prompt (this and every other session of the agent)."""
        await self._agent.quarantine(reason)

    # -- session settings -----------------------------------------------------------------

    def offer(self, modes: SessionModeState | None, config_options: list[Any] | None) -> None:
        """Record what a session/new, load or resume result offered."""
        if modes is not None:
            self.modes = modes
        if config_options is not None:
            self.config_options = list(config_options)

    async def set_config_option(self, config_id: str, value: str | bool) -> None:
        """Choose a config option (kept, and applied again after a restore).

        Raises:
            LocalProtocolError: the agent offered no config option with that id.
        """
        self._check_open()
        if config_id not in {getattr(option, "id", None) for option in self.config_options}:
            raise LocalProtocolError(
                f"{self._agent.name} offers no config option {config_id!r} for session {self.id}"
            )
        response = await self._agent.call(
            AgentConnection.set_config_option, self.id, config_id, value
        )
        self.config_options = list(response.config_options)
        self.config_choices[config_id] = value

    async def set_mode(self, mode_id: str) -> None:
        """Choose a mode (legacy; kept, and applied again after a restore).

        Raises:
            LocalProtocolError: the agent offered no such mode.
        """
        self._check_open()
        offered = {mode.id for mode in self.modes.available_modes} if self.modes else set()
        if mode_id not in offered:
            raise LocalProtocolError(
                f"{self._agent.name} offers no mode {mode_id!r} for session {self.id}"
            )
        await self._agent.call(AgentConnection.set_mode, self.id, mode_id)
        self.mode_id = mode_id

    async def close(self) -> None:
        """``session/close`` where supported; the session is forgotten either way."""
        if self.closed:
            return
        await self.cancel()
        await self._agent.close_session(self)

    def _check_open(self) -> None:
        if self.closed:
            raise ResourceClosedError(f"session {self.id} is closed")
