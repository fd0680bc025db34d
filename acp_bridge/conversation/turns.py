"""A conversation's turns, run: each start the :class:`~.queue.QueueMachine` decides becomes a
task that waits for the agent, confirms the start, records it, prompts through the
:class:`~acp_bridge.session.driver.TurnDriver`, and tells the machine how the turn ended. The
final states the machine then decides are committed and published here too (see
:mod:`.boundaries`).

Commits. When a turn ends and the next message can start at once (the agent is ready, its
prompt is at hand), the message's final state and the next one's start are one commit
(:meth:`TurnRunner.finish_and_start`); otherwise the next turn's task waits for the agent and
records its start alone.

Every step that asks the machine goes through the conversation's ``act`` (or holds its
``acting`` lock), so steps of different tasks never interleave. The machine is reached through
a getter: :meth:`~.conversation.Conversation.start` replaces it with the restored one.

Each turn task runs in a shielded scope (:class:`TurnTasks`) that only the conversation's
shutdown cancels: leaving the conversation, even cancelled from outside, lets the running turn
close and be recorded first. Bound: one task per start the machine decides, and it decides
one at a time (a start only when no turn holds the queue's slot).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup

from acp_bridge.client.supervisor import SupervisedAgent
from acp_bridge.conversation.boundaries import SubmittedFinal, TurnBoundaries, started_event
from acp_bridge.conversation.journal import TurnJournal, answered_usage
from acp_bridge.conversation.queue import QueueMachine
from acp_bridge.conversation.queue_model import Action, Answered, Failed, MessageFinal, StartTurn
from acp_bridge.conversation.turn_events import TurnEvents
from acp_bridge.errors import AgentError, BridgeError, ResourceClosedError
from acp_bridge.session.driver import TurnDriver

__all__ = ["Act", "TurnRunner", "TurnTasks"]

_STOP_OR_CLOSE = ("stop", "close", "interrupt")

Act = Callable[[Callable[[], list[Action]]], Awaitable[None]]
"""``act(decide)``: ask the machine and perform its answer, as one step of the conversation."""


@dataclass
class TurnTasks:
    """The turn tasks: each runs in a shielded scope that only
    :meth:`~.conversation.Conversation.shutdown` cancels, so leaving the conversation (even
    cancelled from outside) lets the running turn close and be recorded first."""

    scopes: set[anyio.CancelScope] = field(default_factory=set)
    none_left: anyio.Event = field(default_factory=anyio.Event)


class TurnRunner:
    def __init__(
        self,
        boundaries: TurnBoundaries,
        driver: TurnDriver,
        agent: SupervisedAgent,
        *,
        journal: TurnJournal,
        turn_events: TurnEvents,
        prompts: dict[int, list[dict[str, Any]]],
        task_group: TaskGroup,
        machine: Callable[[], QueueMachine],
        acting: anyio.Lock,
        act: Act,
        busy: Callable[[], None],
    ) -> None:
        self._boundaries = boundaries
        self._driver = driver
        self._agent = agent
        self._journal = journal
        self._turn_events = turn_events
        # Prompts sent in this process, until their turn starts (shared with the conversation,
        # which adds them; later ones are read from the store).
        self._prompts = prompts
        self._task_group = task_group
        self._machine = machine
        self._acting = acting
        self._act = act
        self._busy = busy  # a turn task is on its way: the conversation is not idle
        self.tasks = TurnTasks()
        self.tasks.none_left.set()

    def begin(self, start: StartTurn, prompt: list[dict[str, Any]] | None) -> None:
        """Run the turn of ``start`` in its own task; ``prompt``: it is confirmed and recorded
        running already (see :meth:`finish_and_start`), prompt at once."""
        self._busy()
        self._task_group.start_soon(self._guarded_turn, start, prompt)

    def can_start_at_once(self, start: StartTurn) -> bool:
        return self._agent.is_ready and start.seq in self._prompts

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
            blocks = self._prompts.pop(start.seq)
            # True: decided in this very step, and the agent is ready (so not gone for good).
            confirmed = self._machine().start_confirmed(start.seq, start.generation)
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
            if not self.tasks.scopes:
                self.tasks.none_left = anyio.Event()
            self.tasks.scopes.add(scope)
            try:
                if started_prompt is None:
                    started_prompt = await self._start_turn(start)
                if started_prompt is not None:
                    await self._run_turn(start.seq, started_prompt)
            finally:
                self.tasks.scopes.discard(scope)
                if not self.tasks.scopes:
                    self.tasks.none_left.set()

    async def _start_turn(self, start: StartTurn) -> list[dict[str, Any]] | None:
        """Wait for the agent, confirm the start and record it running: the prompt to send,
        or None when the start was withdrawn meanwhile or the agent is gone."""
        seq = start.seq
        try:
            await self._agent.wait_ready()  # a cold start or a restart in progress
        except AgentError:
            await self._act(self._machine().agent_gone)
            return None
        blocks = self._prompts.pop(seq, None) or await self._boundaries.stored_prompt(seq)
        started = started_event(seq, blocks)
        async with self._acting:
            if not self._machine().start_confirmed(seq, start.generation):
                return None  # withdrawn while we waited: never prompted
            self._driver.prepare()  # a stop from now on cancels this turn
            await self._boundaries.submit_running(seq, started).result()
            await self._boundaries.began(seq, started)
        return blocks

    async def _run_turn(self, seq: int, blocks: list[dict[str, Any]]) -> None:
        try:
            outcome = await self._driver.run(
                blocks, partial(self._turn_events.on_event, seq), prepared=True
            )
        except BridgeError as exc:  # no turn started: the agent is gone, or was closed
            self._journal.turn_not_started()
            failure = Failed(str(exc), False)
            await self._act(lambda: self._machine().turn_ended(seq, failure))
            if not isinstance(exc, ResourceClosedError):
                await self._act(self._machine().agent_gone)
            return
        self._journal.observe_answer(seq, answered_usage(self._driver))
        if outcome.status == "cancelled" and outcome.cancel_reason not in _STOP_OR_CLOSE:
            await self._act(lambda: self._machine().turn_timed_out(seq))  # the driver's deadline
        if outcome.status == "failed":
            result: Answered | Failed = Failed(outcome.error or "failed", outcome.recoverable)
        else:
            result = Answered(outcome.stop_reason or "cancelled")

        def decide() -> list[Action]:
            # One step: a waiter must not see the pause of an unrecoverable failure alone
            # when the agent is in fact gone for good.
            actions = self._machine().turn_ended(seq, result)
            return actions + self._machine().agent_gone() if self._agent.is_failed else actions

        await self._act(decide)

    async def _finished(self, final: MessageFinal, submitted: SubmittedFinal) -> None:
        self._prompts.pop(final.seq, None)  # ended without a turn (a start withdrawn, say)
        await self._boundaries.finished(final, submitted)
