"""Writing a whole conversation copied from another store (``acp-bridge store copy``) into a
SQLite store: the conversation's row, its messages as they are (states, positions, attempts,
replies, usage), and its event log in order (the events get this store's ids, increasing as
they were). One transaction: all of it or nothing. See :mod:`.store` for the whole story."""

from __future__ import annotations

from collections.abc import Sequence

from acp_bridge.conversation.records import (
    ConversationRecord,
    EventRecord,
    StoredMessage,
    dumps,
)
from acp_bridge.conversation.store_connection import StoreConnection

__all__ = ["ConversationImport", "conversation_usage_json"]


def conversation_usage_json(record: ConversationRecord) -> str:
    """The conversation's ``usage`` column: its totals with the cost meter inside."""
    return dumps({**record.usage.to_json(), "meter": record.cost_meter.to_json()})


class ConversationImport:
    """Copies conversations into the store behind ``connection``."""

    def __init__(self, connection: StoreConnection) -> None:
        self._connection = connection

    def import_conversation(
        self,
        record: ConversationRecord,
        messages: Sequence[StoredMessage],
        events: Sequence[EventRecord],
    ) -> bool:
        """Store ``record`` with its ``messages`` and ``events``; False (and nothing changes)
        when a conversation with its id is already here."""
        with self._connection.transaction(f"copy conversation {record.id!r}") as db:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (record.id,)).fetchone():
                return False
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at, agent, cwd, session_id,"
                " mcp_servers, additional_directories, config, paused, title, usage)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id, record.created_at, record.updated_at, dumps(record.agent),
                    record.cwd, record.session_id, dumps(record.mcp_servers),
                    dumps(record.additional_directories), dumps(record.config),
                    int(record.paused), record.title, conversation_usage_json(record),
                ),
            )  # fmt: skip
            db.executemany(
                "INSERT INTO messages (conversation_id, seq, position, content, state,"
                " stop_reason, error, recoverable, attempts, created_at, started_at,"
                " finished_at, reply, reply_truncated, usage, steered_into)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        record.id, m.seq, m.position, dumps(m.content), m.state.value,
                        m.stop_reason, None if m.error is None else dumps(m.error),
                        None if m.recoverable is None else int(m.recoverable), m.attempts,
                        m.created_at, m.started_at, m.finished_at, m.reply,
                        int(m.reply_truncated), dumps(m.usage.to_json()), m.steered_into,
                    )
                    for m in messages
                ],
            )  # fmt: skip
            db.executemany(
                "INSERT INTO events (conversation_id, ts, seq, kind, data) VALUES (?, ?, ?, ?, ?)",
                [(record.id, e.ts, e.seq, e.kind, dumps(e.data)) for e in events],
            )
            return True
