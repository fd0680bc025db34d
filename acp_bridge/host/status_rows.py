"""The queue's part of a row of ``acp-bridge status`` (``_acp_bridge/status``), one shape for
every owner: a host's conversation, a ``run``/``chat`` owner's, and one nobody has open (read
from the store). Light on purpose: the ``status`` command imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acp_bridge.conversation.queue_states import GateState

if TYPE_CHECKING:
    from acp_bridge.conversation.conversation import Conversation
    from acp_bridge.conversation.store_api import Store

__all__ = ["queue_status", "stored_queue_status"]


def queue_status(conversation: Conversation) -> dict[str, Any]:
    """The queue's part of a status row of an open conversation: ``queueDepth`` (the messages
    waiting, not the running one), ``runningSeq``, ``paused`` (a stop holds the queue)."""
    queue = conversation.queue
    return {
        "queueDepth": len(queue.queued),
        "runningSeq": queue.running,
        "paused": queue.gate is GateState.PAUSED,
    }


def stored_queue_status(store: Store, conversation_id: str, *, paused: bool) -> dict[str, Any]:
    """:func:`queue_status` of a conversation nobody has open, from the store."""
    messages = store.messages(conversation_id, ["queued", "running"])
    running = [m.seq for m in messages if m.state == "running"]
    return {
        "queueDepth": sum(1 for m in messages if m.state == "queued"),
        "runningSeq": running[0] if running else None,
        "paused": paused,
    }
