"""Re-initialize a restarted agent with the editor's params and restore the editor's sessions.

The order, the budgets and the concurrency are the core's restore plan
(:mod:`acp_bridge.core.restore_plan`): a session with a prompt waiting first, each session
within a budget of its own, a bounded number at once. The bridge's own requests
(:meth:`RelayGeneration.call`) carry their own ids; the agent's replay of a ``session/load`` is
swallowed by the relay while the generation is ``restoring``. A session that neither load nor
resume brings back, or that runs over its budget, is marked *lost* in the registry with the
reason (the plan's module says why the proxy marks lost where the library replaces). A
generation that cannot be re-initialized or re-authenticated within ``startup_timeout_s`` is
ended: it counts as a crash for the restart policy, and the sessions stay unrestored (not lost)
for the next attempt. The mode and config options the editor chose are applied again to each
restored session (a refusal is logged, the session stays restored).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from acp_bridge.core.restore_plan import RestoreBudget, RestoreRefused, restore_all
from acp_bridge.proxy.frames import Frame
from acp_bridge.proxy.generation import RelayGeneration
from acp_bridge.proxy.registry import EditorSessions, RestoreStep

__all__ = ["restore_sessions"]

log = logging.getLogger(__name__)


def error_text(frame: Frame) -> str:
    error = frame.error
    return f"{error.get('code')} {error.get('message')}".strip()


async def restore_sessions(
    gen: RelayGeneration,
    registry: EditorSessions,
    *,
    startup_timeout_s: float,
    budget: RestoreBudget,
    name: str,
    restored: Callable[[str, str], None],
    waiting: Callable[[str], bool],
) -> list[str]:
    """The ids of the sessions lost. ``restored(session_id, method)`` hears each success;
    ``waiting(session_id)``: a prompt waits for that session (it is restored first).

    Raises:
        GenerationEnded: the process went away meanwhile.
    """
    with anyio.move_on_after(startup_timeout_s) as scope:
        if registry.initialize_params is not None:
            reply = await gen.call("initialize", registry.initialize_params)
            if reply.is_error:
                gen.end(f"could not be re-initialized: {error_text(reply)}")
                return []
            registry.initialized(registry.initialize_params, reply.result)
        if registry.authenticate_params is not None:
            reply = await gen.call("authenticate", registry.authenticate_params)
            if reply.is_error:
                gen.end(f"could not be re-authenticated: {error_text(reply)}")
                return []
    if scope.cancelled_caught:
        gen.end(f"did not initialize within {startup_timeout_s:g} s")
        return []

    async def restore(step: RestoreStep) -> None:
        session_id = step.record.session_id
        why = "the agent can neither load nor resume sessions"
        for method in step.methods:
            reply = await gen.call(method, step.record.restore_params())
            if not reply.is_error:
                log.info("%s: session %s restored by %s", name, session_id, method)
                restored(session_id, method)
                for setting, params in step.settings:  # the editor's mode and options
                    answer = await gen.call(setting, params)
                    if answer.is_error:
                        log.warning(
                            "%s: session %s: %s not applied again: %s",
                            name,
                            session_id,
                            setting,
                            error_text(answer),
                        )
                return
            why = f"{method} failed: {error_text(reply)}"
        raise RestoreRefused(why)

    plan = registry.plan()
    failures = await restore_all(
        plan, restore, budget, waiting=lambda step: waiting(step.record.session_id)
    )
    lost: list[str] = []
    for step, why in failures:
        session_id = step.record.session_id
        log.warning("%s: session %s lost: %s", name, session_id, why)
        registry.mark_lost(session_id, why)
        lost.append(session_id)
    if plan and not failures:
        log.warning("%s: %d session(s) restored", name, len(plan))
    return lost
