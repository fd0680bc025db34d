"""The owner lock of a conversation: implemented in :mod:`acp_bridge.host.owner` (the host
holds it for every conversation it serves); re-exported here for the CLI's commands."""

from __future__ import annotations

from acp_bridge.host.owner import (
    ConversationBusyError,
    ConversationOwner,
    OwnerInfo,
    lock_path,
    read_owner,
)

__all__ = ["ConversationBusyError", "ConversationOwner", "OwnerInfo", "lock_path", "read_owner"]
