"""What a running turn's events leave behind, in order: the transcript and usage (the
:class:`~.journal.TurnJournal`, which also hears of the prompt's answer and of a turn that
never started), the log entries a resume needs (tool calls, permission decisions, closed tool
calls), every update (see :mod:`.update_log`), and the events to subscribers.

The log entries are not committed one by one: they come at the agent's pace, so they wait in
the journal's pending batch and go into the turn's final commit, or earlier in one commit per
:data:`~.journal.LOG_BATCH` entries (the bound). A crash of the bridge loses at most the pending
batch of the turn it cut, which is then recorded failed, recoverable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from acp_bridge.client.events import PermissionDecided, ToolCallClosed, TurnEvent, UpdateReceived
from acp_bridge.conversation.journal import TurnJournal
from acp_bridge.conversation.records import UpdateData
from acp_bridge.conversation.store_catalog import LogEntry

__all__ = ["TurnEvents"]

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]
WriteLog = Callable[[list[LogEntry]], Awaitable[None]]


class TurnEvents:
    def __init__(
        self,
        journal: TurnJournal,
        emit: Emit,
        write_log: WriteLog,
        pending: Callable[[], None] = lambda: None,
    ) -> None:
        self._journal = journal
        self._emit = emit
        self._write_log = write_log
        self._pending = pending  # entries wait in the batch: commit them soon

    async def on_event(self, seq: int, event: TurnEvent) -> None:
        """One event of the turn of message ``seq``, as the driver reports it."""
        if isinstance(event, UpdateReceived):
            self._journal.observe_update(seq, event.session_id, event.raw)
            if event.raw.get("sessionUpdate") == "tool_call":
                # Kept (small) so a resume can tell which MCP servers the history used, also
                # for tools that never asked permission.
                call = {k: event.raw.get(k) for k in ("toolCallId", "title", "kind")}
                await self._log_later("tool_call", {"seq": seq, "toolCall": call}, seq)
            update = UpdateData(seq, event.session_id, event.raw)  # encoded once, when logged
            await self._log_later("update", update, seq)
            await self._emit("update", update)
        elif isinstance(event, PermissionDecided):
            decision = event.option_kind or "cancelled"
            data = {"seq": seq, "toolCall": event.tool_call, "decision": decision}
            await self._log_later("permission", data, seq)
            await self._emit("permission", data)
        elif isinstance(event, ToolCallClosed):
            data = {
                "seq": seq,
                "toolCallId": event.tool_call_id,
                "status": event.status,
                "reason": event.reason,
            }
            await self._log_later("tool_call_closed", data, seq)
            await self._emit("tool_call_closed", data)

    def answered(self, seq: int, usage: Mapping[str, Any] | None) -> None:
        """The turn of message ``seq`` was answered, with this ``usage`` (None: none)."""
        self._journal.observe_answer(seq, usage)

    def not_started(self) -> None:
        """The turn about to start never did (the agent is gone, or was closed)."""
        self._journal.turn_not_started()

    async def flush_log(self) -> None:
        """Commit the pending log entries now (a stop that cut the turn)."""
        pending = self._journal.take_log()
        if pending:
            await self._write_log(pending)

    async def _log_later(self, name: str, data: dict[str, Any], seq: int) -> None:
        """Log with the turn's final commit (bounded: a full batch is written at once)."""
        if self._journal.log_later((name, data, seq)):
            await self.flush_log()
        else:
            self._pending()
