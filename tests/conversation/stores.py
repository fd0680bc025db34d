"""What the store tests share: the agent record their conversations store, and message content."""

from __future__ import annotations

from typing import Any

AGENT = {"name": "echo", "argv": ["python", "echo_agent.py"], "env": {}, "cwd": "/work"}


def text(value: str) -> list[dict[str, Any]]:
    """One text content block."""
    return [{"type": "text", "text": value}]
