"""Steering a running turn: which method the agent advertises, the call, and its answer.

Two shapes exist (issue 24):

* the extension claude-agent-acp and codex-acp ship: the agent advertises
  ``_meta.steering.supported: true`` on its ``initialize`` result and answers
  ``_session/steering`` ``{sessionId, prompt, _meta: {steering: {idleBehavior}}}`` with
  ``{outcome: "injected" | "startedNewTurn" | "promptRequired" | "failed", reason?}``;
* the ACP draft: ``session/inject`` (mode ``steer``), advertised as the ``session.steering``
  agent capability. Used only when the agent advertises it and not the extension.

The gate is the advertisement, never a probe: codex-acp answers an unknown method with a bare
``{}`` success, which a probe would read as delivered.

We always opt in to ``idleBehavior: "promptRequired"``: a steer that arrives after the turn
ended is refused (``promptRequired``, ``reason: "noRunningTurn"``) instead of starting a turn
nobody owns, and the conversation prompts it itself. An outcome we do not recognise means the
agent took the message (it must never be sent a second time).

:func:`steering_method` and :class:`SteerAnswer` are pure; :func:`request_steer` is the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from acp_bridge.client.connection import AgentConnection
from acp_bridge.record import record
from acp_bridge.wire.initialize import InitializeResponse

__all__ = [
    "INJECT_METHOD",
    "REFUSED_OUTCOMES",
    "STEER_METHOD",
    "SteerAnswer",
    "request_steer",
    "steer_params",
    "steering_method",
]

STEER_METHOD: Final = "_session/steering"
INJECT_METHOD: Final = "session/inject"
REFUSED_OUTCOMES: Final = frozenset({"failed", "promptRequired"})
"""The outcomes that say the agent did not take the message; any other means it did."""


@record
class SteerAnswer:
    """The agent's answer to a steer: its ``outcome`` (``"error"`` for an error answer, which
    the agent did not act upon) and ``reason``, if any."""

    outcome: str
    reason: str | None = None

    @property
    def taken(self) -> bool:
        """The agent took the message (``injected``, ``startedNewTurn``, or any outcome we do
        not know)."""
        return self.outcome not in REFUSED_OUTCOMES and self.outcome != "error"

    @classmethod
    def parse(cls, result: Any) -> SteerAnswer:
        """Read a steering result; a result with no string ``outcome`` counts as taken."""
        if not isinstance(result, Mapping):
            return cls("unknown")
        outcome, reason = result.get("outcome"), result.get("reason")
        return cls(
            outcome if isinstance(outcome, str) else "unknown",
            reason if isinstance(reason, str) else None,
        )


def steering_method(init: InitializeResponse) -> str | None:
    """The steering method ``init`` advertises (the extension first), or None."""
    meta = init.meta if isinstance(init.meta, Mapping) else {}
    steering = meta.get("steering")
    if isinstance(steering, Mapping) and steering.get("supported") is True:
        return STEER_METHOD
    extra = init.agent_capabilities.model_extra or {}
    session = extra.get("session")
    if isinstance(session, Mapping) and session.get("steering") not in (None, False):
        return INJECT_METHOD
    return None


def steer_params(method: str, session_id: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The params of ``method`` for a steer of ``blocks``, opting in to ``promptRequired``."""
    params: dict[str, Any] = {
        "sessionId": session_id,
        "prompt": blocks,
        "_meta": {"steering": {"idleBehavior": "promptRequired"}},
    }
    if method == INJECT_METHOD:
        params["mode"] = "steer"
    return params


async def request_steer(
    connection: AgentConnection, method: str, session_id: str, blocks: list[dict[str, Any]]
) -> SteerAnswer:
    """Call ``method`` and read the answer. The caller owns the deadline.

    Raises:
        RpcError: the agent answered with an error (it did not take the message).
        ConnectionClosedError: the agent's stdout ended before the answer.
    """
    result = await connection.peer.request(method, steer_params(method, session_id, blocks))
    return SteerAnswer.parse(result)
