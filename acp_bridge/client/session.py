"""A session of a supervised agent, as the caller holds it.

The :class:`Session` object outlives agent restarts: its ``id`` stays the same when the session
is restored (``session/load`` or ``session/resume``), and changes, with a ``SessionReplaced``
event, when the agent could only open a new one. It records what a restore needs (cwd, MCP
servers, additional directories, the config options and mode chosen).

At most one prompt is in flight per session: a second ``prompt()`` waits for the first turn to
end, in the order the calls were made.

Every turn, whichever call started it (:meth:`Session.begin`, :meth:`Session.prompt`,
:meth:`Session.run`, the :class:`~acp_bridge.client.turn_driver.TurnDriver`), is a
:class:`~acp_bridge.client.turn.Turn` that performs its own machine: the deadlines, the cancel,
the grace window, the quarantine. The session is the turn's host (it writes ``session/cancel``
and quarantines the agent for it), and it keeps what lies *between* turns:

* one turn at a time;
* an update whose ``messageId`` belongs to the previous turn never reaches the next one;
* after a turn that was cancelled or failed, the next prompt waits until the session has been
  quiet for the turn's ``settle_s`` (at most ``settle_max_s``), so a burst the agent keeps
  sending after its answer lands outside any turn. The quiet is counted from the turn's end: a
  next prompt that comes later than ``settle_s`` after it, with nothing received since, goes
  out at once. A turn that ended normally needs no wait: the protocol puts every update of a
  turn before its answer;
* a quarantined agent is replaced, and its session restored, before the next prompt (the
  supervisor's start of the next turn waits for it).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.turn import Turn, TurnPolicy
from acp_bridge.core.turn_machine import EndedBy, TurnOutcome, TurnStatus, TurnTimings
from acp_bridge.errors import LocalProtocolError, ResourceClosedError
from acp_bridge.record import record
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


@record
class _Settle:
    """The quiet the next prompt waits for: from ``since``, with ``seen`` updates received
    then, ``window_s`` long, waited for at most ``max_s``."""

    since: float
    seen: int
    window_s: float
    max_s: float


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
        self.commands: list[dict[str, Any]] = []
        """The agent's slash commands (``availableCommands`` of its last
        ``available_commands_update``), as sent: a prompt ``/name ...`` runs one."""
        self.history: list[dict[str, Any]] = []
        """The updates replayed by the last ``session/load``: the past, never new output."""
        self.stray_updates: deque[dict[str, Any]] = deque(maxlen=_STRAY_KEPT)
        """Updates that arrived outside any turn (late ones, or live ones after a load)."""
        self.closed = False
        self.updates_seen = 0
        """Updates received for this session, in a turn or not (a counter is cheaper than a
        clock read per update; the settle window watches it)."""
        self.fenced_message_ids: frozenset[str] = frozenset()
        """messageIds of the previous turn: an update carrying one is late, never the next
        turn's."""
        self._turn: Turn | None = None
        self._settle: _Settle | None = None
        """Set when the last turn ended cancelled or failed: the next prompt waits for quiet."""
        self.last_outcome: TurnOutcome | None = None
        """How the session's last turn ended, and who ended it."""
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
    async def prompt(
        self, content: Content, timings: TurnTimings | None = None
    ) -> AsyncIterator[Turn]:
        """Start a turn; iterate the yielded :class:`Turn` for its events.

        ``timings`` bound the turn (see :meth:`begin`). Leaving the block before the turn ended
        cancels it: the agent gets the grace window to answer, after which it is quarantined
        (killed, restarted, the session restored).

        Raises:
            RestartLimitError: the agent is gone for good.
        """
        turn = await self.begin(content, timings)
        try:
            yield turn
        finally:
            await self.end(turn)

    async def begin(self, content: Content, timings: TurnTimings | None = None) -> Turn:
        """Start a turn (waiting for this session's previous turn); pair with :meth:`end`.

        ``timings`` bound the turn: its idle and turn deadlines cancel it (the outcome says
        who: :attr:`Turn.outcome`), kept while the caller iterates the turn or waits on it;
        the grace window defaults to the agent's ``cancel_grace_s``.

        Raises:
            RestartLimitError: the agent is gone for good.
        """
        turn = self.new_turn(None if timings is None else TurnPolicy(timings))
        await self.start(turn, content)
        return turn

    def new_turn(self, policy: TurnPolicy | None = None) -> Turn:
        """A turn of this session, not started yet (:meth:`start` prompts it): a cancel from
        now on applies to it, and goes out as soon as its prompt has."""
        options = self._agent.options
        if policy is None:
            policy = TurnPolicy(TurnTimings(cancel_grace_s=options.cancel_grace_s))
        return Turn(self.id, policy=policy, buffer=options.turn_buffer, host=self)

    async def start(self, turn: Turn, content: Content) -> None:
        """Prompt ``turn`` (from :meth:`new_turn`), once the previous turn ended and the
        session is quiet after it; pair with :meth:`end`.

        Raises:
            RestartLimitError: the agent is gone for good (the turn never started).
        """
        blocks = to_blocks(content)
        await self._turn_lock.acquire()
        try:
            self._check_open()
            if self._settle is not None:
                await self._wait_quiet(self._settle)
            turn.session_id = self.id  # the session may have been replaced meanwhile
            await self._agent.start_turn(self, turn, blocks)
        except BaseException:
            turn.discard()
            self._turn_lock.release()
            raise
        self._turn = turn
        turn.prompt_sent()

    async def end(self, turn: Turn) -> None:
        """Finish with ``turn``. One still open is cancelled through its machine (one grace
        window; quarantine when the agent does not answer). Bounded; never raises."""
        try:
            if not turn.is_closed:  # only then is there anything to wait for (and shield)
                with anyio.CancelScope(shield=True):
                    await turn.cancel(EndedBy.CALLER)
                    await turn.wait_quietly()
            turn.close()
            self.fenced_message_ids = turn.message_ids
            self._ended(turn)
        finally:
            self._turn = None
            self._turn_lock.release()

    async def run(self, content: Content, timings: TurnTimings | None = None) -> PromptResponse:
        """Prompt and wait for the end, ignoring the events. ``timings`` bound the turn (see
        :meth:`begin`); a turn a deadline cancelled returns the agent's answer to the cancel,
        and :attr:`last_outcome` says who ended it.

        Raises:
            RestartLimitError: the agent is gone for good.
            AgentExitedError: the agent died during the turn, or was quarantined.
            RpcError: the agent answered the prompt with an error.
        """
        turn = await self.begin(content, timings)
        try:
            return await turn.wait()
        finally:
            await self.end(turn)

    async def cancel(self) -> None:
        """Cancel the running turn (``session/cancel``, written before this returns); pending
        permission requests are answered ``cancelled``. The turn ends when the agent answers,
        within the grace window (kept by whoever waits on the turn, and by :meth:`end`); a
        no-op when nothing runs."""
        await self._cancel_turn(EndedBy.CALLER)

    async def _cancel_turn(self, by: EndedBy) -> None:
        turn = self._turn
        if turn is not None and not turn.is_closed:
            await turn.cancel(by)

    # -- the turn's host (see Turn) -------------------------------------------------------

    @property
    def quarantine_wait_s(self) -> float:
        return self._agent.options.quarantine_wait_s

    async def write_cancel(self) -> bool:
        """``session/cancel`` for the running turn, bounded by ``cancel_write_timeout_s``, and
        our pending permission requests answered ``cancelled``: the turn's machine decides
        when (use :meth:`cancel`)."""
        return await self._agent.cancel_turn(self)

    def _ended(self, turn: Turn) -> None:
        outcome = turn.outcome
        self.last_outcome = outcome
        if outcome is None or outcome.status is TurnStatus.DONE:
            self._settle = None
            return
        # The quiet counts from the agent's answer or failure (a turn closed by its grace
        # window may have none yet: then from now).
        since = anyio.current_time() if turn.ended_at is None else turn.ended_at
        policy = turn.policy
        self._settle = _Settle(since, self.updates_seen, policy.settle_s, policy.settle_max_s)

    async def _wait_quiet(self, settle: _Settle) -> None:
        """Wait until the session has been quiet for the window (see the module docstring),
        counting from the last turn's end; bounded by ``max_s`` from now.

        The session counts updates instead of stamping them (a clock read per update costs
        the hot path), so quiet means: the count did not move across a whole window. An
        update seen after the turn's end starts a new window from now."""
        since, seen = settle.since, settle.seen
        with anyio.move_on_after(settle.max_s) as scope:
            while True:
                remaining = since + settle.window_s - anyio.current_time()
                if remaining > 0:
                    await anyio.sleep(remaining)
                if self.updates_seen == seen:
                    break
                since, seen = anyio.current_time(), self.updates_seen
        self._settle = None
        if scope.cancelled_caught:
            log.info("%s: still receiving late updates; starting the next turn", self.id)

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
        await self._cancel_turn(EndedBy.CLOSE)
        await self._agent.close_session(self)

    def _check_open(self) -> None:
        if self.closed:
            raise ResourceClosedError(f"session {self.id} is closed")
