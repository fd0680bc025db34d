"""Turns of one session, each run to its outcome with its events handed to a sink, and
cancellable from any task: what the conversation layer runs its turns with.

The turn performs its own machine (:mod:`acp_bridge.client.turn`) and the session keeps what
lies between turns (:mod:`acp_bridge.client.session`); the driver adds two things. It hands
every event to ``on_event`` in the calling task, no helper task. And it holds the turn a cancel
targets, from :meth:`TurnDriver.prepare` on: a cancel asked for before the prompt is out (a
stop while the turn's task was being scheduled) is the machine's early cancel, sent right
after the prompt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from acp_bridge.client.events import TurnEvent
from acp_bridge.client.session import Content, Session
from acp_bridge.client.turn import Turn, TurnPolicy
from acp_bridge.core.turn_machine import EndedBy, TurnOutcome
from acp_bridge.wire.acp import PromptResponse

__all__ = ["EventSink", "TurnDriver"]

EventSink = Callable[[TurnEvent], Awaitable[None]]


class TurnDriver:
    """Turns of ``session``, one at a time, each under ``policy``, each in the calling task."""

    def __init__(self, session: Session, policy: TurnPolicy | None = None) -> None:
        self.session = session
        self.policy = policy or TurnPolicy()
        self._turn: Turn | None = None
        """The turn a cancel targets: prepared, or running."""
        self._last: Turn | None = None

    def __repr__(self) -> str:
        return f"<TurnDriver session={self.session.id!r} turn={self._turn!r}>"

    @property
    def last_response(self) -> PromptResponse | None:
        """The prompt response of the last turn run, if the agent answered it (a cancelled
        turn's answer included); None if it failed or none ran."""
        return self._last.response if self._last is not None else None

    @property
    def is_running(self) -> bool:
        return self._turn is not None and not self._turn.is_closed

    def prepare(self) -> None:
        """A turn is about to start for certain: it exists from now on, so a cancel from now on
        applies to it. Call it synchronously where the start is decided, then :meth:`run` with
        ``prepared=True``."""
        self._turn = self.session.new_turn(self.policy)

    def request_cancel(self, by: EndedBy = EndedBy.CALLER) -> None:
        """Cancel the running turn, or the prepared one; the task running it writes
        ``session/cancel``. Idempotent; never blocks; a no-op with no turn."""
        if self._turn is not None:
            self._turn.request_cancel(by)

    async def cancel(self, by: EndedBy = EndedBy.CALLER) -> None:
        """Cancel the running turn now: ``session/cancel`` is written (bounded) in the calling
        task before this returns, sparing a wake-up of the task running it. The turn still
        ends through :meth:`run`, within the grace window. A no-op with no turn."""
        if self._turn is not None:
            await self._turn.cancel(by)

    async def run(
        self, content: Content, on_event: EventSink | None = None, *, prepared: bool = False
    ) -> TurnOutcome:
        """Run one turn to its outcome. A cancel asked for before the call is forgotten (it
        was for an earlier turn) unless :meth:`prepare` was called for this one.

        Raises:
            RestartLimitError: the agent is gone for good (no turn was started).
            ResourceClosedError: the session or agent was closed.
        """
        turn = self._turn
        if not prepared or turn is None:
            turn = self._turn = self.session.new_turn(self.policy)
        try:
            await self.session.start(turn, content)
        except BaseException:
            self._turn = None
            raise
        try:
            if on_event is None:
                await turn.wait_quietly()
            else:
                async for event in turn:
                    await on_event(event)
        finally:
            await self.session.end(turn)
            self._turn = None
            self._last = turn
        outcome = turn.outcome
        assert outcome is not None, f"{turn!r} ended without an outcome"
        return outcome
