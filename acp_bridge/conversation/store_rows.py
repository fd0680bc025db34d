"""Rows of the queue store read back inside a transaction: decoded into records, with the file
named when one does not decode, and the existence checks every part of the store makes before
it touches a conversation or a message. See :mod:`.store` for the whole story."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.records import (
    ConversationRecord,
    StoredMessage,
    conversation_from_row,
    message_from_row,
)
from acp_bridge.errors import QueueStoreError, UnknownConversationError, UnknownMessageError

__all__ = ["StoredRows"]

_T = TypeVar("_T")


class StoredRows:
    """The row lookups of the store at ``path`` (its name goes into every error)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def decode(self, decode: Callable[[Any], _T], row: sqlite3.Row) -> _T:
        """``decode(row)``; a row it cannot read raises QueueStoreError (a corrupt record).
        The record decoders take a ``Mapping[str, Any]`` (both backends' rows read by column
        name); a ``sqlite3.Row`` reads the same way without being registered as a Mapping,
        hence ``Any`` at this one seam."""
        try:
            return decode(row)
        except (ValueError, TypeError, KeyError) as exc:
            raise QueueStoreError(f"{self._path}: corrupt record {tuple(row)!r}: {exc}") from exc

    def conversation(self, db: sqlite3.Connection, conversation_id: str) -> ConversationRecord:
        """A conversation known to exist."""
        row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        return self.decode(conversation_from_row, row.fetchone())

    def message(
        self, db: sqlite3.Connection, conversation_id: str, seq: int
    ) -> StoredMessage | None:
        row = db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? AND seq = ?", (conversation_id, seq)
        ).fetchone()
        return None if row is None else self.decode(message_from_row, row)

    def require(self, db: sqlite3.Connection, conversation_id: str) -> None:
        """Raises UnknownConversationError if there is no such conversation."""
        if db.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone():
            return
        raise UnknownConversationError(self._path, conversation_id)

    def state(self, db: sqlite3.Connection, conversation_id: str, seq: int) -> MessageState:
        """The message's state; raises UnknownConversationError / UnknownMessageError."""
        row = db.execute(
            "SELECT state FROM messages WHERE conversation_id = ? AND seq = ?",
            (conversation_id, seq),
        ).fetchone()
        if row is None:
            self.require(db, conversation_id)
            raise UnknownMessageError(self._path, conversation_id, seq)
        return self.decode(lambda r: MessageState(r[0]), row)
