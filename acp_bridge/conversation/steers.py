"""Steers, performed: the steering call the :class:`~.queue.QueueMachine` decides
(:class:`~.queue_model.SteerTurn`), and the commits and events of its two ends, ``steered``
(the agent took it into the running turn) and ``steer_fallback`` (it went to the head of the
queue, and why).

The machine decides; this module performs. The order is the durability rule of issue 24:

1. the conversation commits the message ``steering`` (``send(..., steer=True)``), then
2. :meth:`SteerRunner.begin` calls the agent's steering method in a task of its own (so the
   running turn goes on meanwhile), shielded like a turn's task (:class:`~.turns.TurnTasks`:
   only the conversation's shutdown cuts it);
3. the answer goes back to the machine in one step of the conversation: taken (``steered``,
   committed with the turn it joined), refused (``failed``, ``promptRequired``, an error answer:
   committed ``queued`` at the head of the queue, with the reason), or no answer at all (a
   timeout, the agent gone, the call cut: failed, recoverable, "steer unconfirmed", never sent
   again by itself).

Which method, if any: :func:`acp_bridge.client.steering.steering_method`, from what the agent
advertised at ``initialize``; never a probe.

How each steer ended is also kept, briefly, as a :class:`SteerResult` (the last
:data:`RESULTS_KEPT` of them), for a caller that waits for it: the host answers a client's steer
with it (:meth:`SteerRunner.result`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import anyio
from anyio.abc import TaskGroup

from acp_bridge.client.session import Session
from acp_bridge.client.steering import SteerAnswer, request_steer, steering_method
from acp_bridge.conversation.group_commit import GroupCommit
from acp_bridge.conversation.queue_model import (
    STEER_UNCONFIRMED_ERROR,
    Action,
    MessageFinal,
    SteerFallback,
    SteerFallbackReason,
    SteerTurn,
)
from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.store_api import Store
from acp_bridge.conversation.turns import TurnOwner, TurnTasks
from acp_bridge.core.condition import Condition
from acp_bridge.errors import BridgeError, RpcError
from acp_bridge.record import record

__all__ = ["RESULTS_KEPT", "STEER_ANSWER_TIMEOUT_S", "SteerResult", "SteerRunner"]

log = logging.getLogger(__name__)

STEER_ANSWER_TIMEOUT_S: Final = 30.0
"""How long a steer's answer is awaited (no turn starts meanwhile) before it counts as
unconfirmed."""

RESULTS_KEPT: Final = 256
"""How many settled steers' results are kept for :meth:`SteerRunner.result` (the oldest go)."""

Emit = Callable[..., Awaitable[None]]


@record
class SteerResult:
    """How steer ``seq`` ended: ``steered`` into the turn of ``into`` (the agent's
    ``outcome``), ``queued`` at the head of the queue (``reason``, and the agent's ``outcome``
    if it answered), or ``unconfirmed`` (no answer came: failed, recoverable, never sent
    again by itself; ``reason`` is the error)."""

    seq: int
    kind: Literal["steered", "queued", "unconfirmed"]
    into: int | None = None
    outcome: str | None = None
    reason: str | None = None


class SteerRunner:
    """The steers of ``owner``'s queue, called on ``session``'s agent in ``task_group``."""

    def __init__(
        self,
        owner: TurnOwner,
        session: Session,
        store: Store,
        commits: GroupCommit,
        conversation_id: str,
        *,
        tasks: TurnTasks,
        task_group: TaskGroup,
        prompts: dict[int, list[dict[str, Any]]],
        emit: Emit,
        clock: Callable[[], float],
    ) -> None:
        self.id = conversation_id
        self._owner = owner
        self._session = session
        self._store = store
        self._commits = commits
        self._tasks = tasks
        self._task_group = task_group
        self._prompts = prompts
        self._emit = emit
        self._clock = clock
        self._outcomes: dict[int, str] = {}
        self._results: OrderedDict[int, SteerResult] = OrderedDict()
        self._settled = Condition()
        self.timeout_s = STEER_ANSWER_TIMEOUT_S

    def unavailable(self) -> SteerFallbackReason | None:
        """Why the agent cannot take a steer now, as far as the agent goes (the machine knows
        the rest): it is (re)starting, or it advertised no steering method."""
        agent = self._owner.agent
        if not agent.is_ready:
            return "agent_restarting"
        if steering_method(agent.connection.init) is None:
            return "unsupported"
        return None

    async def result(self, seq: int) -> SteerResult:
        """How steer ``seq`` ended, once it did (the caller bounds the wait). A steer whose
        result was dropped (more than :data:`RESULTS_KEPT` settled since) never returns."""
        while (result := self._results.get(seq)) is None:
            await self._settled.wait()
        return result

    def _settle(self, result: SteerResult) -> None:
        self._results[result.seq] = result
        while len(self._results) > RESULTS_KEPT:
            self._results.popitem(last=False)
        self._settled.notify_all()

    def begin(self, action: SteerTurn) -> None:
        self._task_group.start_soon(self._guarded, action)

    async def fell_back(self, action: SteerFallback) -> None:
        """Commit and publish that steer ``action.seq`` went to the head of the queue."""
        data: dict[str, Any] = {"seq": action.seq, "reason": action.reason}
        outcome = self._outcomes.pop(action.seq, None)
        if outcome is not None:
            data["outcome"] = outcome
        event = ("steer_fallback", data)
        now = self._clock()
        if action.requeue:
            await self._commits.call(
                self._store.steer_refused,
                self.id,
                action.seq,
                behind=action.behind,
                now=now,
                event=event,
            )
        else:
            await self._commits.call(
                self._store.add_event, self.id, *event, seq=action.seq, now=now
            )
        await self._emit("steer_fallback", data)
        self._settle(SteerResult(action.seq, "queued", outcome=outcome, reason=action.reason))

    async def steered(self, final: MessageFinal) -> None:
        """Commit and publish that steer ``final.seq`` joined the turn of ``steered_into``."""
        assert final.state is MessageState.STEERED
        self._prompts.pop(final.seq, None)
        data: dict[str, Any] = {"seq": final.seq, "into": final.steered_into}
        outcome = self._outcomes.pop(final.seq, None)
        if outcome is not None:
            data["outcome"] = outcome
        changed = await self._commits.call(
            self._store.finish,
            self.id,
            final.seq,
            final.state,
            now=self._clock(),
            event=("steered", data),
            steered_into=final.steered_into,
        )
        if changed:
            await self._emit("steered", data)
        self._settle(SteerResult(final.seq, "steered", final.steered_into, outcome))

    async def _guarded(self, action: SteerTurn) -> None:
        with anyio.CancelScope(shield=True) as scope:
            self._tasks.scopes.add(scope)
            try:
                await self._steer(action)
            finally:
                self._tasks.scopes.discard(scope)
                self._tasks.changed.notify_all()

    async def _steer(self, action: SteerTurn) -> None:
        seq, owner = action.seq, self._owner
        decide: Callable[[], list[Action]]
        try:
            answer = await self._call(seq)
        except _NotSent as not_sent:
            reason = not_sent.reason

            def decide() -> list[Action]:
                return owner.queue.steer_answered(seq, taken=False, reason=reason)

        except (BridgeError, TimeoutError, anyio.get_cancelled_exc_class()) as exc:
            # Sent, perhaps taken: it must never be sent again by itself.
            log.warning("%s: steer %d unconfirmed: %r", self.id, seq, exc)
            with anyio.CancelScope(shield=True):
                await owner.act(lambda: owner.queue.steer_unconfirmed(seq))
            self._settle(SteerResult(seq, "unconfirmed", reason=STEER_UNCONFIRMED_ERROR))
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            return
        else:
            self._outcomes[seq] = answer.outcome
            refused: SteerFallbackReason = (
                "promptRequired" if answer.outcome == "promptRequired" else "failed"
            )

            def decide() -> list[Action]:
                return owner.queue.steer_answered(seq, taken=answer.taken, reason=refused)

        await owner.act(decide)

    async def _call(self, seq: int) -> SteerAnswer:
        agent = self._owner.agent
        if not agent.is_ready:
            raise _NotSent("agent_restarting")
        connection = agent.connection
        method = steering_method(connection.init)
        if method is None:
            raise _NotSent("unsupported")
        blocks = self._prompts.get(seq) or []
        try:
            with anyio.fail_after(self.timeout_s):
                return await request_steer(connection, method, self._session.id, blocks)
        except RpcError as exc:  # an error answer: the agent did not act on it
            log.info("%s: steer %d refused with an error: %s", self.id, seq, exc)
            return SteerAnswer("error", str(exc))


class _NotSent(Exception):
    def __init__(self, reason: SteerFallbackReason) -> None:
        super().__init__(reason)
        self.reason = reason
