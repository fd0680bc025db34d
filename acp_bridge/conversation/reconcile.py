"""Checking a stored conversation's configuration against the current one. Pure.

Only these cases, each with a clear message:

* a different cwd refuses to load (the agent's files and history live there);
* MCP servers or capabilities added since are fine, and so is a removed server never used;
* a removed MCP server whose tools appear in the stored history is an error naming it.

"Appears in the history" is judged on the tool calls the event log kept: a tool call's title,
name or kind naming the server the way agents name MCP tools (``mcp__<server>__<tool>``,
``<server>/<tool>``, ``<server>.<tool>``, ``<server>:<tool>``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from acp_bridge.errors import ConfigMismatchError

__all__ = ["ConfigMismatchError", "reconcile", "servers_used"]


def reconcile(
    stored: Any, *, cwd: str, mcp_servers: Sequence[dict[str, Any]], history: Iterable[Any]
) -> None:
    """Raise :class:`ConfigMismatchError` if ``stored`` cannot go on as configured now."""
    if str(stored.cwd) != str(cwd):
        raise ConfigMismatchError(
            f"conversation {stored.id} was started in {stored.cwd}, not {cwd}; run it from "
            f"its own directory (--cwd {stored.cwd}) or start a new conversation"
        )
    current = {str(server.get("name")) for server in mcp_servers}
    removed = {str(s.get("name")) for s in stored.mcp_servers} - current
    used = servers_used(removed, history)
    if used:
        names = ", ".join(sorted(used))
        raise ConfigMismatchError(
            f"conversation {stored.id} used the MCP server(s) {names}, which are not "
            "configured any more; add them back or start a new conversation"
        )


def servers_used(servers: Iterable[str], history: Iterable[Any]) -> set[str]:
    """Which of ``servers`` appear in the tool calls of ``history`` (event records)."""
    patterns = {
        name: re.compile(
            rf"(?:^|\b)(?:mcp__{re.escape(name)}__|{re.escape(name)}[/.:])", re.IGNORECASE
        )
        for name in servers
        if name
    }
    used: set[str] = set()
    if not patterns:
        return used  # nothing to look for: the history (maybe long, maybe lazy) is not read
    for event in history:
        data = getattr(event, "data", event) or {}
        tool = data.get("toolCall") or data.get("tool_call") or {}
        texts = [str(tool.get(key, "")) for key in ("title", "name", "kind")]
        for name, pattern in patterns.items():
            if any(pattern.search(text) for text in texts):
                used.add(name)
    return used
