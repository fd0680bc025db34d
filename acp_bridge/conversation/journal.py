"""What a conversation writes down about its turns, apart from their states: the running turn's
reply and usage (:mod:`.transcript`), the conversation's usage totals and cost meter
(:mod:`.usage`), the batch of log entries waiting for the turn's final commit, and the final
event itself. No I/O of its own: :class:`~.conversation.Conversation` commits and publishes.

Bounds: the reply is bounded by :data:`~.transcript.REPLY_LIMIT_BYTES`; pending log entries by
:data:`LOG_BATCH` (when full the conversation writes them at once, see :meth:`log_later`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from acp_bridge.client.turn_driver import TurnDriver
from acp_bridge.conversation.queue_model import MessageFinal
from acp_bridge.conversation.queue_states import MessageState
from acp_bridge.conversation.records import FinishedTurn
from acp_bridge.conversation.store_catalog import LogEntry
from acp_bridge.conversation.transcript import TurnRecord
from acp_bridge.conversation.usage import CostMeter, UsageTotals

__all__ = ["LOG_BATCH", "FinalEvent", "TurnJournal", "answered_usage", "final_event"]

LOG_BATCH: Final = 256
"""Pending permission / tool-call log entries written in one commit when this many wait."""

StructuredError = Callable[[dict[str, Any], "bool | None"], dict[str, Any]]


class TurnJournal:
    def __init__(self, usage: UsageTotals, meter: CostMeter) -> None:
        self.usage = usage
        """What the conversation's messages spent so far (their final states committed)."""
        self._meter = meter
        self._record: TurnRecord | None = None
        self._pending: list[LogEntry] = []

    def continue_from(self, usage: UsageTotals, meter: CostMeter) -> None:
        """Totals and cost meter as stored now (the conversation is opened again)."""
        self.usage, self._meter = usage, meter

    # -- the running turn -------------------------------------------------------------------

    def turn_started(self, seq: int) -> None:
        self._record = TurnRecord(seq, self._meter)

    def turn_not_started(self) -> None:
        self._record = None

    def observe_update(self, seq: int, session_id: str, update: Mapping[str, Any]) -> None:
        record = self._record
        if record is not None and record.seq == seq:
            record.observe(session_id, update)

    def observe_answer(self, seq: int, usage: Mapping[str, Any] | None) -> None:
        record = self._record
        if record is not None and record.seq == seq:
            record.observe_answer(usage)

    def take_turn(self, seq: int) -> FinishedTurn | None:
        """What the turn of ``seq`` left, if it ran in this process (once)."""
        record = self._record
        if record is None or record.seq != seq:
            return None
        self._record = None
        reply = record.reply
        meter = record.usage.meter
        return FinishedTurn(
            reply.text, reply.truncated, record.spent(), meter, meter != record.meter_at_start
        )

    def settled(self, turn: FinishedTurn) -> None:
        """``turn`` was committed with its message's final state: count it, once."""
        self.usage, self._meter = self.usage.plus(turn.usage), turn.meter

    # -- the log batch ----------------------------------------------------------------------

    def log_later(self, entry: LogEntry) -> bool:
        """Keep ``entry`` for the turn's final commit; True when the batch is full (write
        :meth:`take_log` now)."""
        self._pending.append(entry)
        return len(self._pending) >= LOG_BATCH

    def take_log(self) -> list[LogEntry]:
        pending, self._pending = self._pending, []
        return pending


class FinalEvent:
    """A message's final state as stored and published: ``name`` (turn_ended or turn_failed),
    its ``data``, the stored ``state`` and ``error``."""

    def __init__(
        self, name: str, data: dict[str, Any], state: str, error: dict[str, Any] | None
    ) -> None:
        self.name, self.data, self.state, self.error = name, data, state, error


def final_event(
    final: MessageFinal,
    turn: FinishedTurn | None,
    duration_ms: float,
    structured_error: StructuredError,
) -> FinalEvent:
    """The final event of ``final``; ``usage`` is what its turn spent, when it ran here."""
    error = None
    if final.error is not None:
        error = {"code": "turn_failed", "message": final.error, "details": {}}
    state = final.state.name.lower()
    if final.state is MessageState.FAILED:
        name = "turn_failed"
        data: dict[str, Any] = {
            "seq": final.seq,
            "error": structured_error(error or {}, final.recoverable),
            "recoverable": final.recoverable,
        }
    else:
        name = "turn_ended"
        done = final.state is MessageState.DONE
        data = {
            "seq": final.seq,
            "stopReason": final.stop_reason if done else "cancelled",
            "state": state,
            "duration_ms": round(duration_ms, 1),
        }
    if turn is not None:
        data["usage"] = turn.usage.to_json()
    return FinalEvent(name, data, state, error)


def answered_usage(driver: TurnDriver) -> dict[str, Any] | None:
    """The ``usage`` of the prompt response of the driver's last turn, if it answered with one."""
    response = driver.last_response
    return None if response is None or response.usage is None else response.usage.dump()
