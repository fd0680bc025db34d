"""What a client of the host is shown for each entry of a conversation's event log (pure).

An ACP client attached to a conversation (``session/new``, ``session/load``) sees the
conversation's history and then its live turns as ``session/update`` notifications whose
``sessionId`` is the conversation id (stable across agent restarts):

* an ``update`` entry: the agent's update, unchanged;
* a ``turn_started`` entry: the prompt, as a ``user_message_chunk`` (``_meta.acpBridge``: the
  message's ``seq`` and, when a host client sent it, the sender's ``label``). Live, the client
  that sent the prompt is not shown its own prompt again;
* anything else: nothing (turn ends answer ``session/prompt``; lifecycle events are the
  host's business).

A watcher (``_acp_bridge/watch``) sees every entry as the CLI's ``--json`` event (``event`` and
``ts``, the entry's data), with the entry's id as its cursor.

The sender of a message is logged as a ``message_sender`` entry when the host commits it,
before its turn starts (the group commit keeps that order), so a replay knows it too.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "SENDER_KIND",
    "SenderLabels",
    "acp_update",
    "watch_event",
]

SENDER_KIND: Final = "message_sender"
_LABELS_KEPT: Final = 1024
"""Labels of messages not started yet, kept for their ``turn_started`` (oldest dropped)."""


class SenderLabels:
    """Who sent each message not started yet: ``seq -> (client number or None, label)``."""

    def __init__(self) -> None:
        self._labels: dict[int, tuple[int | None, str]] = {}

    def note(self, seq: int, client: int | None, label: str) -> None:
        self._labels[seq] = (client, label)
        while len(self._labels) > _LABELS_KEPT:
            self._labels.pop(next(iter(self._labels)))

    def take(self, seq: int) -> tuple[int | None, str | None]:
        client, label = self._labels.pop(seq, (None, None))
        return client, label

    def see(self, kind: str, data: Any) -> None:
        """A ``message_sender`` entry read from the log."""
        if kind == SENDER_KIND and isinstance(data, dict) and isinstance(data.get("seq"), int):
            self._labels.setdefault(data["seq"], (None, str(data.get("label", ""))))


def acp_update(
    conversation_id: str, kind: str, data: Any, label: str | None
) -> dict[str, Any] | None:
    """The ``session/update`` params an ACP client is shown for a log entry, or None."""
    if not isinstance(data, dict):
        return None
    if kind == "update":
        update = data.get("update")
        if not isinstance(update, dict):
            return None
        return {"sessionId": conversation_id, "update": update}
    if kind == "turn_started":
        meta: dict[str, Any] = {"seq": data.get("seq")}
        if label:
            meta["sender"] = label
        return {
            "sessionId": conversation_id,
            "update": {
                "sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": str(data.get("text", ""))},
                "_meta": {"acpBridge": meta},
            },
        }
    return None


def watch_event(
    conversation_id: str, cursor: int, kind: str, ts: float, data: Any
) -> dict[str, Any]:
    """The ``_acp_bridge/event`` params a watcher is shown for a log entry."""
    event: dict[str, Any] = {"event": kind, "ts": ts}
    if isinstance(data, dict):
        event.update(data)
    else:
        event["data"] = data
    return {"conversationId": conversation_id, "cursor": cursor, "event": event}
