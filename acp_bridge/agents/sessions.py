"""A session's live state in the agent process (its history lives in :mod:`.store`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from acp_bridge.agents.tools import mode_state

__all__ = ["AgentSession"]


@dataclass
class AgentSession:
    id: str
    cwd: str
    mode: str
    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    """What the model sees: every message of the session so far."""
    always_allowed: set[str] = field(default_factory=set)
    cost: float | None = None
    """Cumulative cost in USD, None while no request had a known price."""
    turn: anyio.CancelScope | None = None
    """The running prompt turn; ``session/cancel`` cancels it."""
    additional_directories: tuple[str, ...] = ()
    """The session's roots beside ``cwd`` (``additionalDirectories`` of new/load/resume)."""

    @property
    def roots(self) -> tuple[str, ...]:
        """The directories the tools may touch: ``cwd``, then the additional ones."""
        return (self.cwd, *self.additional_directories)

    def setup(self, model_choices: tuple[str, ...]) -> dict[str, Any]:
        """``modes`` and ``configOptions`` of a new/load/resume response."""
        return {"modes": mode_state(self.mode), "configOptions": self.config_options(model_choices)}

    def config_options(self, model_choices: tuple[str, ...]) -> list[dict[str, Any]]:
        choices = list(model_choices)
        if self.model not in choices:
            choices.insert(0, self.model)
        return [
            {
                "type": "select",
                "id": "mode",
                "name": "Mode",
                "category": "mode",
                "currentValue": self.mode,
                "options": [
                    {"value": "ask", "name": "Ask", "description": "read-only tools"},
                    {"value": "code", "name": "Code", "description": "all tools, asking first"},
                ],
            },
            {
                "type": "select",
                "id": "model",
                "name": "Model",
                "category": "model",
                "currentValue": self.model,
                "options": [{"value": model, "name": model} for model in choices],
            },
        ]
