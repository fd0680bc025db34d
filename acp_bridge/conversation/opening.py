"""Opening a stored conversation on a supervised agent: its session, its queue, its events.

The agent session is the stored one (or the one asked for): restored with ``session/load``,
else ``session/resume``; if the agent refuses, a new session stands in and a ``session`` event
says which it replaced. Messages left ``running`` by a crash of the bridge end failed and
recoverable; the queue goes on with the next message never prompted.

Leaving the context, however it is left (the body returns, raises, or is cancelled from
outside), stops the conversation the way :meth:`Conversation.shutdown` describes: the running
turn is cancelled and waited for, bounded, and recorded ``cancelled`` before any task is
cancelled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from acp_bridge.client.events import AgentStarted
from acp_bridge.client.session import Session
from acp_bridge.client.supervisor import SupervisedAgent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.queue_model import BRIDGE_STOPPED_ERROR
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store_api import Store
from acp_bridge.errors import BridgeError, SessionRestoreError

__all__ = ["open_conversation"]

log = logging.getLogger(__name__)

_LAST_EVENTS_S = 2.0
"""Closing publishes the lifecycle events still waiting (the store commits each) within this."""


@asynccontextmanager
async def open_conversation(
    store: Store,
    agent: SupervisedAgent,
    record: ConversationRecord,
    *,
    policy: TurnPolicy | None = None,
    session_id: str | None = None,
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[Conversation]:
    """Run ``record``'s conversation on ``agent``.

    The agent session is the stored one (or ``session_id``): restored with ``session/load``,
    else ``session/resume``; if the agent refuses, a new session stands in and a
    ``session_replaced`` event says so. Messages left ``running`` by a crash of the bridge end
    failed and recoverable; the queue goes on with the next message never prompted.

    ``clock`` (epoch seconds) is the conversation's one clock: it stamps everything stored
    (``now``) and published (``ts``), and times each turn (``duration_ms``).
    """
    scope = _conversation_scope(store, agent, record, policy, session_id, clock)
    try:
        async with scope as conversation:
            yield conversation
    except BaseExceptionGroup as group:
        # The caller's own exception comes back wrapped by the task group: unwrap it alone.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise


@asynccontextmanager
async def _conversation_scope(
    store: Store,
    agent: SupervisedAgent,
    record: ConversationRecord,
    policy: TurnPolicy | None,
    session_id: str | None,
    clock: Callable[[], float],
) -> AsyncIterator[Conversation]:
    async with anyio.create_task_group() as tg:
        session, how, replaced_from = await _open_session(agent, record, session_id)
        conversation = Conversation(
            store, record, agent, session, policy or TurnPolicy(), tg, clock=clock
        )
        # Synchronous: each lifecycle event is stamped and queued as it happens, so it reaches
        # subscribers in causal order with the turn's events (a subscriber task would see it
        # only after events that were emitted later).
        stop_listening = agent.listen(conversation.note_lifecycle)
        try:
            await _start(conversation, store, record, session, how, replaced_from, tg, clock)
            yield conversation
        finally:
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                await conversation.shutdown()
                stop_listening()
                with anyio.move_on_after(_LAST_EVENTS_S):
                    await conversation.flush_lifecycle(final=True)  # e.g. agent_gave_up
                conversation.close_subscribers()
            tg.cancel_scope.cancel()


async def _start(
    conversation: Conversation,
    store: Store,
    record: ConversationRecord,
    session: Session,
    how: str,
    replaced_from: str | None,
    tg: TaskGroup,
    clock: Callable[[], float],
) -> None:
    await _apply_choices(session, record)
    await anyio.to_thread.run_sync(
        lambda: store.update_conversation(record.id, session_id=session.id, now=clock())
    )

    tg.start_soon(conversation.forward_lifecycle)
    for event in conversation.agent.event_log:
        if isinstance(event, AgentStarted):
            conversation.note_lifecycle(event)  # before we listened: the start of this agent
    data: dict[str, Any] = {"sessionId": session.id, "how": how, "conversation": record.id}
    if replaced_from is not None:
        data["replaced"] = replaced_from
    await conversation.emit("session", data, keep=True)
    recovered = await anyio.to_thread.run_sync(
        lambda: store.recover_after_crash(record.id, now=clock())
    )
    for seq in recovered:
        data = {
            "seq": seq,
            "error": conversation.structured_error(dict(BRIDGE_STOPPED_ERROR), True),
            "recoverable": True,
        }
        await conversation.emit("turn_failed", data, seq=seq, keep=True)
    records, prompts = await anyio.to_thread.run_sync(lambda: store.queue_state(record.id))
    fresh = await anyio.to_thread.run_sync(lambda: store.get_conversation(record.id))
    await conversation.start(
        records, paused=bool(fresh and fresh.paused), stored=fresh, prompts=prompts
    )


async def _open_session(
    agent: SupervisedAgent, record: ConversationRecord, session_id: str | None
) -> tuple[Session, str, str | None]:
    cwd = Path(record.cwd)
    wanted = session_id or record.session_id
    args = (cwd, list(record.mcp_servers), [Path(d) for d in record.additional_directories])
    if wanted:
        capabilities = (await agent.wait_ready()).capabilities
        refusal = "it can neither load nor resume sessions"
        try:
            if capabilities.supports_load():
                return await agent.load_session(wanted, *args), "load", None
            if capabilities.supports_resume():
                return await agent.resume_session(wanted, *args), "resume", None
        except BridgeError as exc:
            refusal = str(exc)
            log.warning("%s: could not restore session %s: %s", agent.name, wanted, exc)
        if session_id:
            # The user asked for this session by name: a new one in its place would be a
            # different conversation than the one asked for. (The stored conversation's own
            # session is replaced instead, and session_replaced says so.)
            raise SessionRestoreError(
                f"{agent.name} could not restore session {session_id}: {refusal}"
            )
        return await agent.new_session(*args), "new", wanted
    return await agent.new_session(*args), "new", None


async def _apply_choices(session: Session, record: ConversationRecord) -> None:
    """The config options and mode chosen earlier in this conversation, applied again (a new
    process starts from the agent's defaults). One the agent no longer offers is skipped."""
    config = record.config or {}
    choices = [(k, v) for k, v in dict(config.get("options") or {}).items()]
    mode = config.get("mode")
    try:
        if isinstance(mode, str):
            await session.set_mode(mode)
        for config_id, value in choices:
            await session.set_config_option(str(config_id), value)
    except BridgeError as exc:
        log.warning("%s: could not apply the stored choices: %s", session.id, exc)
