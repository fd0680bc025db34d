"""The proxy's prompts in motion: what :class:`~.turns.PromptTurns` decides, performed.

:class:`PromptFlow` takes the editor's ``session/prompt`` and ``session/cancel`` to the pure
turns, and performs their actions: forwards a prompt to the current agent process (and adds it
to the editor's requests in flight), answers ``cancelled`` or a full queue itself, arms a timer
per cancel grace (in the relay's task group) and quarantines an agent whose grace expired. A
prompt the agent never read (no process to take it, or its write refused) goes back to the head
of its session's queue; :meth:`PromptFlow.resume` forwards the queues' heads after a restore.

:meth:`PromptFlow.perform` changes the tables (the turns, the editor's requests) before its
first await, so a generation that ends meanwhile finds them as the actions left them. The
requests the last exit cut stay the relay's (its restore answers them); this reaches them only
through ``take_cut``. No buffer of its own: the bounds are the turns' queues and the tables'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import anyio
from anyio.abc import TaskGroup

from acp_bridge.proxy import answers
from acp_bridge.proxy.editor_link import EditorLink
from acp_bridge.proxy.frames import IdKey
from acp_bridge.proxy.generation import RelayGeneration
from acp_bridge.proxy.registry import EditorSessions
from acp_bridge.proxy.routing import EditorRequests, PendingEditorRequest
from acp_bridge.proxy.supervision import RelayLifetime
from acp_bridge.proxy.turns import (
    AnswerCancelled,
    ArmGraceTimer,
    ForwardPrompt,
    PromptTurns,
    QuarantineAgent,
    QueuedPrompt,
    RefuseQueueFull,
    TurnsAction,
)

__all__ = ["PromptFlow"]

log = logging.getLogger(__name__)


class PromptFlow:
    def __init__(
        self,
        agent_name: str,
        agents: RelayLifetime,
        editor: EditorLink,
        turns: PromptTurns,
        registry: EditorSessions,
        editor_requests: EditorRequests,
        *,
        grace_s: float,
        take_cut: Callable[[IdKey], bool],
    ) -> None:
        self._agent_name = agent_name
        self._agents = agents
        self._editor = editor
        self._turns = turns
        self._registry = registry
        self._editor_requests = editor_requests
        self._grace_s = grace_s
        self._take_cut = take_cut
        """Take a request out of those the last exit cut; False when it is not there."""
        self.task_group: TaskGroup | None = None
        """Where the grace timers run (the relay's main task group, once it runs)."""

    async def prompt(self, prompt: QueuedPrompt) -> None:
        """The editor sent ``session/prompt``: forwarded now, or queued behind its session's."""
        await self.perform(self._turns.prompt(prompt, anyio.current_time()))

    async def cancel(self, gen: RelayGeneration, session_id: str, line: bytes) -> None:
        """The editor sent ``session/cancel``: it goes to the agent as it came."""
        actions = self._turns.cancel(session_id, anyio.current_time())
        await gen.send(line)
        await self.perform(actions)

    async def resume(self, lost: Iterable[str] = ()) -> None:
        """After a restore: the queues go on; the prompts queued for ``lost`` sessions are
        refused."""
        actions, refused = self._turns.resume(anyio.current_time(), lost)
        for prompt in refused:
            why = self._registry.lost_reason(prompt.session_id) or "it could not be restored"
            await self._editor.send(answers.lost_session_error(prompt.id, prompt.session_id, why))
        await self.perform(actions)

    async def perform(self, actions: Sequence[TurnsAction]) -> None:
        # Bookkeeping first, with no await in between, then the writes: a generation that
        # ends meanwhile must find the tables as the actions left them.
        writes: list[tuple[RelayGeneration | None, bytes, QueuedPrompt | None]] = []
        no_agent: list[QueuedPrompt] = []
        for action in actions:
            if isinstance(action, ForwardPrompt):
                gen = self._agents.generation
                forwarded = action.prompt
                if gen is None or not gen.alive:
                    no_agent.append(forwarded)  # nobody to take it: after the restore
                    continue
                pending = _pending_prompt(forwarded.id, forwarded.session_id, gen.number)
                self._editor_requests.add(pending)
                writes.append((gen, forwarded.line, forwarded))
            elif isinstance(action, AnswerCancelled):
                self._editor_requests.take(action.prompt.key)
                writes.append((None, answers.cancelled_answer(action.prompt.id), None))
            elif isinstance(action, ArmGraceTimer):
                assert self.task_group is not None
                self.task_group.start_soon(self._grace_timer, action.session_id, action.deadline)
            elif isinstance(action, QuarantineAgent):
                gen = self._agents.generation
                if gen is not None and gen.alive:
                    log.warning(
                        "%s did not answer a cancelled prompt within %g s; replacing it",
                        self._agent_name,
                        self._grace_s,
                    )
                    gen.quarantine(f"was quarantined: {action.reason}")
            elif isinstance(action, RefuseQueueFull):
                error = answers.error_answer(
                    action.prompt.id, answers.INTERNAL_ERROR, action.message
                )
                writes.append((None, error, None))
        self._turns.unsend(*no_agent)
        for target, line, prompt in writes:
            if target is None:
                await self._editor.send(line)
            elif not await target.send(line) and prompt is not None:
                await self._never_sent(prompt)

    async def _never_sent(self, prompt: QueuedPrompt) -> None:
        """The agent refused the prompt's write (its stdin closed): it never saw the prompt, so
        it is not cut by the exit (no error for it) but waits at the head of its session's
        queue for the restored session, or for the agent's end for good."""
        if self._editor_requests.take(prompt.key) is None and not self._take_cut(prompt.key):
            return  # answered meanwhile (the agent gone for good)
        self._turns.unsend(prompt)
        if self._agents.is_ready:  # a restore finished meanwhile: nothing else will resume it
            lost = self._registry.lost_reason(prompt.session_id) is not None
            await self.resume([prompt.session_id] if lost else [])

    async def _grace_timer(self, session_id: str, deadline: float) -> None:
        await anyio.sleep_until(deadline)
        await self.perform(self._turns.tick(session_id, anyio.current_time()))


def _pending_prompt(request_id: Any, session_id: str, generation: int) -> PendingEditorRequest:
    return PendingEditorRequest(request_id, "session/prompt", session_id, generation, {})
