"""Which tool calls of a turn are still open. Pure: fed raw updates, no I/O.

Every tool call opened in a turn must end in exactly one terminal state. The agent normally
closes its own (``completed``/``failed``); when a turn ends by crash, error or cancel, the bridge
closes the rest once, and from then on ignores whatever the agent says about them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TERMINAL_STATUSES", "ToolCallTracker"]

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
"""``cancelled`` is a v2 draft status; accepting it costs nothing."""


class ToolCallTracker:
    def __init__(self) -> None:
        self._open: dict[str, str] = {}  # id -> last known status, in opening order
        self._closed: set[str] = set()

    def observe(self, update: dict[str, Any]) -> bool:
        """Account for one raw update. Returns False when it must be dropped: it speaks of a
        tool call that is already closed (a late update never overwrites a terminal state)."""
        kind = update.get("sessionUpdate")
        if kind not in ("tool_call", "tool_call_update"):
            return True
        tool_call_id = update.get("toolCallId")
        if not isinstance(tool_call_id, str):
            return True
        if tool_call_id in self._closed:
            return False
        status = update.get("status")
        if not isinstance(status, str):
            status = self._open.get(tool_call_id, "pending")
        if status in TERMINAL_STATUSES:
            self._open.pop(tool_call_id, None)
            self._closed.add(tool_call_id)
        else:
            self._open[tool_call_id] = status
        return True

    def close_all(self) -> list[str]:
        """Close every open tool call (once); returns their ids in opening order."""
        ids = list(self._open)
        self._open.clear()
        self._closed.update(ids)
        return ids
