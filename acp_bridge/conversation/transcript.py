"""What a turn leaves for the transcript: the agent's reply text and what it spent. Pure.

:class:`TurnRecord` follows one running turn: the text of its ``agent_message_chunk`` updates,
concatenated (other content blocks, thoughts and tool calls are not part of the reply text;
the ``--json`` stream has them), and its :class:`~.usage.TurnUsage`. The conversation stores
both with the message's final state, in the same commit.

Bound: a reply keeps at most :data:`REPLY_LIMIT_BYTES` bytes of UTF-8 per message. At the
bound the text is cut at a character boundary, ``truncated`` is set (the store keeps the flag,
``show`` says so) and later chunks of the turn are dropped; the turn itself goes on untouched.
A retried message's reply is the reply of its last attempt.

A turn cut by a crash of the bridge stores no reply: its text lived in this process only (the
message ends failed, recoverable).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from acp_bridge.conversation.usage import CostMeter, TurnUsage, UsageTotals

__all__ = ["REPLY_LIMIT_BYTES", "ReplyText", "TurnRecord"]

REPLY_LIMIT_BYTES: Final = 1 << 20
"""The most of a message's reply kept, in bytes of UTF-8 (1 MiB)."""


class ReplyText:
    """Text appended chunk by chunk, kept up to ``limit`` bytes of UTF-8 (see the module)."""

    def __init__(self, limit: int = REPLY_LIMIT_BYTES) -> None:
        self.limit = limit
        self.truncated = False
        self._parts: list[str] = []
        self._bytes = 0

    def add(self, text: str) -> None:
        if self.truncated or not text:
            return
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        room = self.limit - self._bytes
        if size <= room:
            self._parts.append(text)
            self._bytes += size
            return
        # errors="ignore" drops a character the cut went through, never half of one.
        kept = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
        self._parts.append(kept)
        self._bytes += len(kept.encode("utf-8"))
        self.truncated = True

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    @property
    def size(self) -> int:
        """Bytes of UTF-8 kept."""
        return self._bytes


class TurnRecord:
    """One running turn's reply and usage, fed its raw updates and its answer's usage."""

    def __init__(self, seq: int, meter: CostMeter, limit: int = REPLY_LIMIT_BYTES) -> None:
        self.seq = seq
        self.reply = ReplyText(limit)
        self.usage = TurnUsage(meter)
        self.meter_at_start = meter

    def observe(self, session_id: str, update: Mapping[str, Any]) -> None:
        """One ``session/update`` of the turn (raw). Cheap for the updates it ignores."""
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            # dict, not Mapping: an ABC check costs as much as the rest of this path (per update)
            content = update.get("content")
            if type(content) is dict and content.get("type") == "text":
                text = content.get("text")
                if type(text) is str:
                    self.reply.add(text)
        elif kind == "usage_update":
            self.usage.observe_update(session_id, update)

    def observe_answer(self, usage: Mapping[str, Any] | None) -> None:
        self.usage.observe_answer(usage)

    def spent(self) -> UsageTotals:
        return self.usage.result()
