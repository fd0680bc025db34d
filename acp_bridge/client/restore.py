"""Bringing the library's sessions back on a restarted agent: load, else resume, else replaced.

The order, the budgets and the concurrency are the core's restore plan
(:mod:`acp_bridge.core.restore_plan`); what is done for one session is here.
``session/load`` replays the whole conversation before it answers; the replay is collected into
``Session.history`` and never delivered as new output. An agent that refuses the load (an
error answer such as -32002 or -32603) falls back to resume. A session that neither brings
back, or whose restore ran over its budget, is *replaced*: a new session in the same cwd, under
the same :class:`Session` object, reported as :class:`SessionReplaced` with the reason (the
plan's module says why the library replaces where the proxy marks lost). A transport failure
(the new process dies during the load) is not a refusal: it propagates, and the restart counts
as failed. After a restore, the config options and mode the caller chose are applied again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import anyio

from acp_bridge.client.connection import AgentConnection
from acp_bridge.client.events import LifecycleEvent, SessionReplaced, SessionRestored
from acp_bridge.client.session import Session
from acp_bridge.core.restore_plan import RestoreBudget, RestoreRefused, restore_all
from acp_bridge.errors import LocalProtocolError, RemoteProtocolError, RpcError

__all__ = ["RestoreHost", "restore_sessions"]


class RestoreHost(Protocol):
    """What a restore needs from the supervisor: its name, its events, re-keying a session."""

    @property
    def name(self) -> str: ...
    def emit(self, event: LifecycleEvent) -> None: ...
    def rename_session(self, session: Session, new_id: str) -> None: ...

log = logging.getLogger(__name__)


async def restore_sessions(
    agent: RestoreHost,
    connection: AgentConnection,
    sessions: Sequence[Session],
    budget: RestoreBudget,
) -> None:
    """Restore ``sessions`` on ``connection``'s process by the plan; replace those that fail.

    Raises:
        ConnectionClosedError: the process died during the restore.
        AuthRequiredError: the agent wants authentication first.
        TimeoutError: a replacement session could not be opened within the budget.
    """

    async def restore(session: Session) -> None:
        await _restore_one(agent, connection, session)

    failures = await restore_all(sessions, restore, budget, waiting=lambda s: s.in_use)
    for session, reason in failures:
        with anyio.fail_after(budget.per_session_s):
            await _replace(agent, connection, session, reason)


async def _restore_one(agent: RestoreHost, connection: AgentConnection, session: Session) -> None:
    """Load, else resume ``session``.

    Raises:
        RestoreRefused: the agent refused both (or can do neither); the reasons.
    """
    old_id = session.id
    args = (session.cwd, session.mcp_servers, session.additional_directories)
    refusals: list[str] = []
    capabilities = connection.capabilities
    if capabilities.supports_load():
        session.replay = []
        try:
            loaded = await connection.load_session(old_id, *args)
            session.offer(loaded.modes, loaded.config_options)
            session.history = session.replay
            agent.emit(SessionRestored(old_id, "load"))
            await _reapply_choices(agent, connection, session)
            return
        except (RpcError, RemoteProtocolError) as exc:
            refusals.append(f"session/load refused: {exc}")
        finally:
            session.replay = None
    if capabilities.supports_resume():
        try:
            resumed = await connection.resume_session(old_id, *args)
            session.offer(resumed.modes, resumed.config_options)
            agent.emit(SessionRestored(old_id, "resume"))
            await _reapply_choices(agent, connection, session)
            return
        except (RpcError, RemoteProtocolError) as exc:
            refusals.append(f"session/resume refused: {exc}")
    if not refusals:
        refusals.append("the agent supports neither session/load nor session/resume")
    raise RestoreRefused("; ".join(refusals))


async def _replace(
    agent: RestoreHost, connection: AgentConnection, session: Session, reason: str
) -> None:
    old_id = session.id
    args = (session.cwd, session.mcp_servers, session.additional_directories)
    response = await connection.new_session(*args)
    session.offer(response.modes, response.config_options)
    agent.rename_session(session, response.session_id)
    log.warning(
        "%s: session %s replaced by %s (%s)",
        agent.name,
        old_id,
        session.id,
        reason,
        extra={"acp_event": SessionReplaced.kind},  # the event's log twin: see EventHub.emit
    )
    agent.emit(SessionReplaced(old_id, session.id, reason))
    await _reapply_choices(agent, connection, session)


async def _reapply_choices(
    agent: RestoreHost, connection: AgentConnection, session: Session
) -> None:
    try:
        if session.mode_id is not None:
            await connection.set_mode(session.id, session.mode_id)
        for config_id, value in session.config_choices.items():
            await connection.set_config_option(session.id, config_id, value)
    except (RpcError, LocalProtocolError, RemoteProtocolError) as exc:
        log.warning(
            "%s: could not re-apply the choices of session %s: %s", agent.name, session.id, exc
        )
