"""A session of a supervised agent, as the caller holds it.

The :class:`Session` object outlives agent restarts: its ``id`` stays the same when the session
is restored (``session/load`` or ``session/resume``), and changes, with a ``SessionReplaced``
event, when the agent could only open a new one. It records what a restore needs (cwd, MCP
servers, additional directories, the config options and mode chosen).

At most one prompt is in flight per session: a second ``prompt()`` waits for the first turn to
end, in the order the calls were made.

A turn's lifecycle is its :class:`~acp_bridge.core.turn_machine.TurnMachine`; the session
performs its actions (:meth:`Session.perform`): send ``session/cancel`` within a bound, wait out
the grace window, quarantine the agent. The session layer's driver performs the same machine
through the same method, so a turn has one grace window, whoever cancels it.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.turn import Turn
from acp_bridge.core.turn_machine import (
    CancelUnwritable,
    Quarantine,
    SendCancel,
    Tick,
    TurnAction,
    TurnCancelRequested,
    TurnTimings,
)
from acp_bridge.errors import LocalProtocolError, ResourceClosedError
from acp_bridge.wire.acp import PromptResponse, SessionModeState
from acp_bridge.wire.base import WireModel

__all__ = ["Content", "Session", "SessionHost", "to_blocks"]

_T = TypeVar("_T")


class SessionHost(Protocol):
    """What a session needs from its supervised agent, and nothing more."""

    @property
    def name(self) -> str: ...
    @property
    def options(self) -> ClientOptions: ...

    async def call(self, method: Callable[..., Awaitable[_T]], *args: Any) -> _T: ...
    async def start_turn(
        self, session: Session, turn: Turn, blocks: list[dict[str, Any]]
    ) -> None: ...
    async def cancel_turn(self, session: Session) -> bool: ...
    async def quarantine(self, reason: str) -> None: ...
    async def close_session(self, session: Session) -> None: ...


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
        agent: SessionHost,
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
        # Uncontended, acquiring costs no scheduler pass (turns in a row are the common case).
        self._turn_lock = anyio.Lock(fast_acquire=True)
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
    def in_use(self) -> bool:
        """A turn is held or waiting to begin on this session (its restore goes first)."""
        return self._turn_lock.locked()

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

    async def begin(self, content: Content, timings: TurnTimings | None = None) -> Turn:
        """Start a turn (waiting for this session's previous turn); pair with :meth:`end`.

        ``timings`` bound the turn (idle and turn deadlines); the grace window defaults to the
        agent's ``cancel_grace_s``.

        Raises:
            RestartLimitError: the agent is gone for good.
        """
        blocks = to_blocks(content)
        options = self._agent.options
        timings = timings or TurnTimings(cancel_grace_s=options.cancel_grace_s)
        await self._turn_lock.acquire()
        try:
            self._check_open()
            turn = Turn(self.id, buffer=options.turn_buffer, timings=timings)
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
        """Finish with ``turn``. One still open is cancelled through its machine (one grace
        window; quarantine when the agent does not answer). Bounded; never raises."""
        try:
            if not turn.is_closed:  # only then is there anything to wait for (and shield)
                with anyio.CancelScope(shield=True):
                    await self.cancel_and_close(turn, "the caller left the turn before it ended")
            turn.close()
            self.fenced_message_ids = turn.message_ids
        finally:
            self._turn = None
            self._turn_lock.release()

    async def cancel_and_close(self, turn: Turn, reason: str) -> None:
        """Cancel ``turn`` and perform its machine until it closes: the answer, an error, or
        the grace window (then the agent is quarantined). Bounded by the grace window, the
        cancel write bound and the quarantine wait."""
        machine = turn.machine
        await self.perform(turn, machine.handle(TurnCancelRequested(reason, anyio.current_time())))
        while not turn.is_closed:
            deadline = machine.next_deadline()
            wait_s = math.inf if deadline is None else deadline - anyio.current_time()
            with anyio.move_on_after(max(0.0, wait_s)):
                await turn.wait_quietly()
            if not turn.is_closed:
                await self.perform(turn, machine.handle(Tick(anyio.current_time())))

    async def perform(self, turn: Turn, actions: list[TurnAction]) -> None:
        """Carry out what ``turn``'s machine decided (ArmGrace and Close need nothing here:
        whoever runs the turn reads the machine's next deadline and state)."""
        for action in actions:
            if isinstance(action, SendCancel):
                # Bounded by the agent (cancel_write_timeout_s): a pipe so full that even the
                # cancel cannot be written counts as no answer.
                if not await self._agent.cancel_turn(self):
                    await self.perform(turn, turn.machine.handle(CancelUnwritable()))
            elif isinstance(action, Quarantine):
                log.warning("%s: quarantining the agent: %s", self.id, action.reason)
                await self._agent.quarantine(action.reason)
                # The exit report fails the turn's agent side; wait for it, bounded, so the
                # next prompt goes to the restored session, not the dying process.
                with anyio.move_on_after(self._agent.options.quarantine_wait_s):
                    await turn.wait_quietly()

    async def run(self, content: Content) -> PromptResponse:
        """Prompt and wait for the end, ignoring the events."""
        turn = await self.begin(content)
        try:
            return await turn.wait()
        finally:
            await self.end(turn)

    async def cancel(self) -> None:
        """Cancel the running turn (``session/cancel``); pending permission requests are answered
        ``cancelled``. The turn ends when the agent answers, within the grace window (run by
        whoever holds the turn: :meth:`end` or the driver); a no-op when nothing runs."""
        turn = self._turn
        if turn is not None and not turn.is_closed:
            now = anyio.current_time()
            await self.perform(turn, turn.machine.handle(TurnCancelRequested("cancelled", now)))

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
