"""A conversation's turns, run: each start the :class:`~.queue.QueueMachine` decides becomes a
task that waits for the agent, confirms the start, records it, prompts through the
:class:`~acp_bridge.client.turn_driver.TurnDriver`, and tells the machine how the turn ended.
The final states the machine then decides are committed and published here too (see
:mod:`.boundaries`).

Commits. When a turn ends and the next message can start at once (the agent is ready, its
prompt is at hand), the message's final state and the next one's start are one commit
(:meth:`TurnRunner.finish_and_start`); otherwise the next turn's task waits for the agent and
records its start alone.

Every step that asks the machine goes through the conversation's ``act`` (or holds its
``acting`` lock), so steps of different tasks never interleave. The machine is the
conversation's current one (:attr:`TurnOwner.queue`): ``Conversation.start`` replaces it with
the restored one.

How a turn ended counts by who ended it (:class:`~acp_bridge.core.turn_machine.EndedBy`): a
turn a deadline cancelled is reported to the machine as timed out; a stop, close or interrupt
the machine asked for itself.

Each turn task runs in a shielded scope (:class:`TurnTasks`) that only the conversation's
shutdown cancels: leaving the conversation, even cancelled from outside, lets the running turn
close and be recorded first. Bound: one task per start the machine decides, and it decides
one at a time (a start only when no turn holds the queue's slot).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskGroup

from acp_bridge.client.supervisor import SupervisedAgent
from acp_bridge.client.turn_driver import TurnDriver
from acp_bridge.conversation.boundaries import SubmittedFinal, TurnBoundaries, started_event
from acp_bridge.conversation.journal import answered_usage
from acp_bridge.conversation.queue import QueueMachine
from acp_bridge.conversation.queue_model import (
    Action,
    Answered,
    CancelReason,
    Failed,
    MessageFinal,
    StartTurn,
)
from acp_bridge.conversation.turn_events import TurnEvents
from acp_bridge.core.condition import Condition
from acp_bridge.core.turn_machine import EndedBy, TurnStatus
from acp_bridge.errors import AgentError, BridgeError, ResourceClosedError

__all__ = ["Act", "TurnOwner", "TurnRunner", "TurnTasks"]

Act = Callable[[Callable[[], list[Action]]], Awaitable[None]]
"""``act(decide)``: ask the machine and perform its answer, as one step of the conversation."""

_ENDED_BY: Final[Mapping[CancelReason, EndedBy]] = {
    "interrupt": EndedBy.INTERRUPT,
    "stop": EndedBy.STOP,
    "close": EndedBy.CLOSE,
    "timeout": EndedBy.TURN_DEADLINE,  # the turn's deadline closed it already: a no-op
}
"""Who ends the turn, for each cancel the queue machine asks for."""


class TurnOwner(Protocol):
    """What the turn tasks ask of their conversation."""

    @property
    def agent(self) -> SupervisedAgent: ...

    @property
    def queue(self) -> QueueMachine:
        """The queue machine now (``Conversation.start`` replaces it)."""
        ...

    @property
    def acting(self) -> anyio.Lock:
        """Held by one step of the conversation at a time."""
        ...

    async def act(self, decide: Callable[[], list[Action]]) -> None:
        """Ask the machine (``decide``) and perform its answer, as one step."""
        ...


@dataclass
class TurnTasks:
    """The turn tasks: each runs in a shielded scope that only
    :meth:`~.conversation.Conversation.shutdown` cancels, so leaving the conversation (even
    cancelled from outside) lets the running turn close and be recorded first."""

    scopes: set[anyio.CancelScope] = field(default_factory=set)
    changed: Condition = field(default_factory=Condition)
    """Notified when a turn task ends."""

    async def wait_none_left(self) -> None:
        while self.scopes:
            await self.changed.wait()


class TurnRunner:
    """The turns of ``owner``'s queue, run by ``driver`` in ``task_group``; their starts and
    ends recorded through ``boundaries``, their events through ``events``."""

    def __init__(
        self,
        owner: TurnOwner,
        driver: TurnDriver,
        boundaries: TurnBoundaries,
        events: TurnEvents,
        task_group: TaskGroup,
    ) -> None:
        self._owner = owner
        self._driver = driver
        self._boundaries = boundaries
        self._events = events
        self._task_group = task_group
        self.prompts: dict[int, list[dict[str, Any]]] = {}
        """Prompts sent in this process, by seq, until their turn starts (the conversation adds
        them; later ones are read from the store)."""
        self.tasks = TurnTasks()

    def cancel(self, reason: CancelReason) -> None:
        """Cancel the running turn, or the one about to start (never blocks)."""
        self._driver.request_cancel(_ENDED_BY[reason])

    def begin(self, start: StartTurn, prompt: list[dict[str, Any]] | None) -> None:
        """Run the turn of ``start`` in its own task; ``prompt``: it is confirmed and recorded
        running already (see :meth:`finish_and_start`), prompt at once."""
        self._task_group.start_soon(self._guarded_turn, start, prompt)

    def can_start_at_once(self, start: StartTurn) -> bool:
        return self._owner.agent.is_ready and start.seq in self.prompts

    async def finish(self, final: MessageFinal) -> None:
        await self._finished(final, self._boundaries.submit_final(final))

    async def finish_and_start(self, final: MessageFinal, start: StartTurn) -> None:
        """A message's final state and the next message's start, in one commit: the common
        case of a queue draining (the agent is ready and the next prompt was sent in this
        process). The start is confirmed now, under the same step as the final state, so it
        is recorded running before the turn's task prompts, as on the slow path.

        Shielded from the confirmation to the turn's task: a caller cancelled in between (an
        interrupting send, a cut turn) must not leave a message confirmed, perhaps committed
        running, that no task will ever prompt or end."""
        with anyio.CancelScope(shield=True):
            blocks = self.prompts.pop(start.seq)
            # True: decided in this very step, and the agent is ready (so not gone for good).
            confirmed = self._owner.queue.start_confirmed(start.seq, start.generation)
            assert confirmed
            self._driver.prepare()  # a stop from now on cancels this turn
            started = started_event(start.seq, blocks)
            finish = self._boundaries.submit_final(final)
            running = self._boundaries.submit_running(start.seq, started)
            await self._finished(final, finish)
            await running.result()
            await self._boundaries.began(start.seq, started)
            self.begin(start, blocks)

    async def _guarded_turn(
        self, start: StartTurn, started_prompt: list[dict[str, Any]] | None
    ) -> None:
        with anyio.CancelScope(shield=True) as scope:
            self.tasks.scopes.add(scope)
            try:
                if started_prompt is None:
                    started_prompt = await self._start_turn(start)
                if started_prompt is not None:
                    await self._run_turn(start.seq, started_prompt)
            finally:
                self.tasks.scopes.discard(scope)
                self.tasks.changed.notify_all()

    async def _start_turn(self, start: StartTurn) -> list[dict[str, Any]] | None:
        """Wait for the agent, confirm the start and record it running: the prompt to send,
        or None when the start was withdrawn meanwhile or the agent is gone."""
        seq, owner = start.seq, self._owner
        try:
            await owner.agent.wait_ready()  # a cold start or a restart in progress
        except AgentError:
            await owner.act(lambda: owner.queue.agent_gone())
            return None
        blocks = self.prompts.pop(seq, None) or await self._boundaries.stored_prompt(seq)
        started = started_event(seq, blocks)
        async with owner.acting:
            if not owner.queue.start_confirmed(seq, start.generation):
                return None  # withdrawn while we waited: never prompted
            self._driver.prepare()  # a stop from now on cancels this turn
            await self._boundaries.submit_running(seq, started).result()
            await self._boundaries.began(seq, started)
        return blocks

    async def _run_turn(self, seq: int, blocks: list[dict[str, Any]]) -> None:
        owner = self._owner
        try:
            outcome = await self._driver.run(
                blocks, partial(self._events.on_event, seq), prepared=True
            )
        except BridgeError as exc:  # no turn started: the agent is gone, or was closed
            self._events.not_started()
            failure = Failed(str(exc), False)
            await owner.act(lambda: owner.queue.turn_ended(seq, failure))
            if not isinstance(exc, ResourceClosedError):
                await owner.act(lambda: owner.queue.agent_gone())
            return
        self._events.answered(seq, answered_usage(self._driver))
        if outcome.ended_by.is_deadline:  # the queue asked for no cancel: it times out
            await owner.act(lambda: owner.queue.turn_timed_out(seq))
        if outcome.status is TurnStatus.FAILED:
            result: Answered | Failed = Failed(outcome.error or "failed", outcome.recoverable)
        else:
            result = Answered(outcome.stop_reason or "cancelled")

        def decide() -> list[Action]:
            # One step: a waiter must not see the pause of an unrecoverable failure alone
            # when the agent is in fact gone for good.
            actions = owner.queue.turn_ended(seq, result)
            return actions + owner.queue.agent_gone() if owner.agent.is_failed else actions

        await owner.act(decide)

    async def _finished(self, final: MessageFinal, submitted: SubmittedFinal) -> None:
        self.prompts.pop(final.seq, None)  # ended without a turn (a start withdrawn, say)
        await self._boundaries.finished(final, submitted)
