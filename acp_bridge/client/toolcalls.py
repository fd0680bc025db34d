"""Which tool calls of a turn are still open. Pure: fed raw updates, no I/O.

Every tool call opened in a turn must end in exactly one terminal state. The agent normally
closes its own (``completed``/``failed``); when a turn ends by crash, error or cancel, the bridge
closes the rest once, and from then on ignores whatever the agent says about them.

Bounded: a turn tracks at most ``max_open`` open tool calls and remembers at most
``max_closed`` closed ones. At the bounds (an agent flooding distinct tool-call ids in one
turn, far beyond any real turn): a tool call opened past ``max_open`` is passed through but not
tracked, so the bridge will not close it at the turn's end (a warning says so, once); past
``max_closed`` the oldest closed ids are forgotten, so a very late update for one of them is no
longer dropped. Memory stays flat either way.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["TERMINAL_STATUSES", "ToolCallTracker"]

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
"""``cancelled`` is a v2 draft status; accepting it costs nothing."""

log = logging.getLogger(__name__)


class ToolCallTracker:
    def __init__(self, *, max_open: int = 10_000, max_closed: int = 100_000) -> None:
        self._open: dict[str, str] = {}  # id -> last known status, in opening order
        self._closed: dict[str, None] = {}  # an ordered set: the oldest is forgotten first
        self._max_open = max_open
        self._max_closed = max_closed
        self._warned = False

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
            self._remember_closed([tool_call_id])
        elif tool_call_id in self._open or len(self._open) < self._max_open:
            self._open[tool_call_id] = status
        elif not self._warned:
            self._warned = True
            log.warning(
                "over %d open tool calls in one turn: new ones are no longer tracked",
                self._max_open,
            )
        return True

    @property
    def has_open(self) -> bool:
        return bool(self._open)

    def close_all(self) -> list[str]:
        """Close every open tool call (once); returns their ids in opening order."""
        if not self._open:
            return []  # the common end of a turn: nothing to close or remember
        ids = list(self._open)
        self._open.clear()
        self._remember_closed(ids)
        return ids

    def _remember_closed(self, ids: list[str]) -> None:
        closed = self._closed
        for tool_call_id in ids:
            closed[tool_call_id] = None
        while len(closed) > self._max_closed:
            del closed[next(iter(closed))]
