"""Tokens, context window and cost, from litellm's bundled model table (no network).

* ``usage_update`` (sent after every model request): ``used`` is the context the last request
  filled (its prompt plus its answer), ``size`` the model's input window, ``cost`` the session's
  cumulative cost in USD. Without a known window no ``usage_update`` is sent (``size`` is
  required); without known prices it has no ``cost``.
* The prompt response's ``usage`` is the turn's total over all its model requests.
"""

from __future__ import annotations

import logging
from typing import Any

from acp_bridge.agents.model import TokenUsage

__all__ = ["UsageMeter", "add_usage", "prompt_usage"]

log = logging.getLogger(__name__)


class UsageMeter:
    def __init__(self, litellm: Any) -> None:
        self._litellm = litellm
        self._windows: dict[str, int | None] = {}  # one turn's models: a handful at most

    def window(self, model: str) -> int | None:
        if model not in self._windows:
            try:
                info = self._litellm.get_model_info(model)
            except Exception:
                info = {}
            size = info.get("max_input_tokens") or info.get("max_tokens")
            valid = isinstance(size, int | float) and size > 0
            self._windows[model] = int(size) if valid else None
        return self._windows[model]

    def cost(self, model: str, usage: TokenUsage) -> float | None:
        try:
            prompt_cost, completion_cost = self._litellm.cost_per_token(
                model=model,
                prompt_tokens=usage.input_tokens,
                completion_tokens=usage.output_tokens,
            )
        except Exception:
            return None
        return float(prompt_cost) + float(completion_cost)

    def update(
        self, model: str, usage: TokenUsage, session_cost: float | None
    ) -> dict[str, Any] | None:
        """The ``usage_update`` for a request that used ``usage``, or None (window unknown)."""
        size = self.window(model)
        if size is None:
            return None
        update: dict[str, Any] = {
            "sessionUpdate": "usage_update",
            "used": usage.input_tokens + usage.output_tokens,
            "size": size,
        }
        if session_cost is not None:
            update["cost"] = {"amount": round(session_cost, 8), "currency": "USD"}
        return update


def add_usage(total: TokenUsage, more: TokenUsage) -> None:
    total.input_tokens += more.input_tokens
    total.output_tokens += more.output_tokens
    total.thought_tokens += more.thought_tokens
    total.cached_read_tokens += more.cached_read_tokens


def prompt_usage(total: TokenUsage) -> dict[str, int]:
    usage = {
        "totalTokens": total.input_tokens + total.output_tokens,
        "inputTokens": total.input_tokens,
        "outputTokens": total.output_tokens,
    }
    if total.thought_tokens:
        usage["thoughtTokens"] = total.thought_tokens
    if total.cached_read_tokens:
        usage["cachedReadTokens"] = total.cached_read_tokens
    return usage
