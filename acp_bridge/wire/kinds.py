"""The string enums of the ACP wire: tool kinds and statuses, plan entries, permission options.

Plain :class:`~enum.StrEnum` classes, without pydantic, so that code which only compares kinds
(the permission policy, for instance) does not import the models. The model modules re-export
them: ``from acp_bridge.wire.updates import ToolKind`` and
``from acp_bridge.wire.client_methods import PermissionOptionKind`` keep working.

Known values get a member; the models accept unknown strings as plain ``str``.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "PermissionOptionKind",
    "PlanEntryPriority",
    "PlanEntryStatus",
    "ToolCallStatus",
    "ToolKind",
]


class ToolKind(StrEnum):
    READ = "read"
    EDIT = "edit"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    EXECUTE = "execute"
    THINK = "think"
    FETCH = "fetch"
    SWITCH_MODE = "switch_mode"
    OTHER = "other"


class ToolCallStatus(StrEnum):
    """v1 statuses; the v2 draft adds ``cancelled``, which parses as a plain ``str``."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"

    @classmethod
    def is_finished(cls, status: str | None) -> bool:
        """A tool call in this status needs no "cancelled" mark when its turn is cancelled."""
        return status in (cls.COMPLETED, cls.FAILED, "cancelled")


class PlanEntryPriority(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class PlanEntryStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class PermissionOptionKind(StrEnum):
    ALLOW_ONCE = "allow_once"
    ALLOW_ALWAYS = "allow_always"
    REJECT_ONCE = "reject_once"
    REJECT_ALWAYS = "reject_always"
