"""The records the queue store reads back, and their JSON columns.

A row becomes a frozen record here; a value that does not decode raises ValueError, TypeError
or KeyError, which the store reports as a corrupt record naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Final, TypeVar

from acp_bridge.conversation.queue_states import MessageRecord, MessageState
from acp_bridge.conversation.usage import CostMeter, UsageTotals
from acp_bridge.record import record

__all__ = [
    "ConversationRecord",
    "ConversationSummary",
    "EventRecord",
    "FinishedTurn",
    "StoredMessage",
    "UpdateData",
    "conversation_from_row",
    "dumps",
    "event_from_row",
    "loads",
    "message_from_row",
]

_J = TypeVar("_J", dict[str, Any], list[Any])


@record(slots=False)
class ConversationRecord:
    """A stored conversation: what to run, where, and the session it last had.

    ``agent`` is the agent spec as JSON (name, argv, env changes, cwd); ``config`` holds the
    config options and mode chosen; ``paused`` is set by a stop until resume or a new send.
    """

    id: str
    agent: dict[str, Any]
    cwd: str
    session_id: str | None
    mcp_servers: list[Any]
    additional_directories: list[Any]
    config: dict[str, Any]
    paused: bool
    title: str | None
    created_at: float
    updated_at: float
    usage: UsageTotals = field(default_factory=UsageTotals)
    """What every message of the conversation spent (see :mod:`.usage`)."""
    cost_meter: CostMeter = field(default_factory=CostMeter)
    """The last cumulative cost seen, the baseline of the next message's cost."""


@record(slots=False)
class StoredMessage:
    """A stored message: the queue's :class:`~.queue_model.MessageRecord` (see
    :meth:`record`) plus what only the store keeps. ``seq`` is its creation order;
    ``position`` its place in the queue (lowest first, meaningful among queued messages);
    ``attempts`` counts its starts. ``content`` holds ACP content blocks; ``error`` is
    ``{code, message, details}``. ``reply`` is the agent's text of its last turn (None when
    none was recorded: not finished yet, cut by a crash of the bridge, or stored by an older
    acp-bridge), ``reply_truncated`` whether it was cut at the bound, and ``usage`` what all
    its attempts spent.
    """

    conversation_id: str
    seq: int
    position: int
    content: list[Any]
    state: MessageState
    stop_reason: str | None
    error: dict[str, Any] | None
    recoverable: bool | None
    attempts: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    reply: str | None = None
    reply_truncated: bool = False
    usage: UsageTotals = field(default_factory=UsageTotals)
    steered_into: int | None = None
    """The seq of the turn a ``steered`` message joined (None otherwise)."""

    @property
    def is_final(self) -> bool:
        return self.state.is_final

    def record(self) -> MessageRecord:
        """The message as the queue machine sees it (attempts count from 1 there)."""
        return _machine_record(
            self.seq, self.state, self.attempts, self.stop_reason, self.error, self.recoverable
        )


def _machine_record(
    seq: int,
    state: MessageState,
    attempts: int,
    stop_reason: str | None,
    error: dict[str, Any] | None,
    recoverable: bool | None,
) -> MessageRecord:
    failed = state is MessageState.FAILED
    message = (error or {}).get("message")
    return MessageRecord(
        seq=seq,
        state=state,
        attempt=max(1, attempts),
        stop_reason=stop_reason,
        error=str(message or "failed") if failed else None,
        recoverable=bool(recoverable) if failed else None,
    )


def record_from_row(row: Mapping[str, Any]) -> MessageRecord:
    """A message row (its state columns alone suffice) as the queue machine sees it."""
    error, recoverable = row["error"], row["recoverable"]
    return _machine_record(
        row["seq"],
        MessageState(row["state"]),
        row["attempts"],
        row["stop_reason"],
        None if error is None else loads(error, dict),
        None if recoverable is None else bool(recoverable),
    )


@record(slots=False)
class EventRecord:
    """One entry of a conversation's turn log; ``id`` increases across the whole store."""

    id: int
    conversation_id: str
    ts: float
    seq: int | None
    kind: str
    data: Any


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""One encoder for every call (``json.dumps`` with these options builds one per call)."""


def dumps(value: Any) -> str:
    if isinstance(value, UpdateData):
        return value.encoded()
    return _ENCODER.encode(value)


class UpdateData(dict[str, Any]):
    """The data of an ``update`` log entry, ``{"seq", "sessionId", "update"}``, that encodes
    the agent's ``update`` once: :func:`dumps` (the store's insert) keeps its text in
    :attr:`update_json`, and the conversation host splices that text into the
    ``session/update`` line it sends every client instead of encoding the update again.
    :func:`dumps` gives the same text as for the plain dict."""

    update_json: str | None = None
    """The ``update``'s JSON text, once :meth:`encoded` ran."""

    def __init__(self, seq: int, session_id: str, update: Any) -> None:
        super().__init__(seq=seq, sessionId=session_id, update=update)

    def encoded(self) -> str:
        if list(self) != ["seq", "sessionId", "update"]:  # changed since: encode it as it is
            return dumps(dict(self))
        text = self.update_json
        if text is None:
            text = self.update_json = _ENCODER.encode(self["update"])
        seq = self["seq"]
        seq_json = str(seq) if type(seq) is int else _ENCODER.encode(seq)  # an int: its digits
        session_json = _ENCODER.encode(self["sessionId"])
        return f'{{"seq":{seq_json},"sessionId":{session_json},"update":{text}}}'


def loads(text: str, kind: type[_J]) -> _J:
    value = json.loads(text)
    if not isinstance(value, kind):
        raise ValueError(f"expected a JSON {kind.__name__}, found {type(value).__name__}")
    return value


def conversation_from_row(row: Mapping[str, Any]) -> ConversationRecord:
    usage = loads(row["usage"], dict)
    return ConversationRecord(
        id=row["id"],
        agent=loads(row["agent"], dict),
        cwd=row["cwd"],
        session_id=row["session_id"],
        mcp_servers=loads(row["mcp_servers"], list),
        additional_directories=loads(row["additional_directories"], list),
        config=loads(row["config"], dict),
        paused=bool(row["paused"]),
        title=row["title"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        usage=UsageTotals.from_json(usage),
        cost_meter=CostMeter.from_json(usage.get("meter")),
    )


def message_from_row(row: Mapping[str, Any]) -> StoredMessage:
    error, recoverable = row["error"], row["recoverable"]
    return StoredMessage(
        conversation_id=row["conversation_id"],
        seq=row["seq"],
        position=row["position"],
        content=loads(row["content"], list),
        state=MessageState(row["state"]),
        stop_reason=row["stop_reason"],
        error=None if error is None else loads(error, dict),
        recoverable=None if recoverable is None else bool(recoverable),
        attempts=row["attempts"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        reply=row["reply"],
        reply_truncated=bool(row["reply_truncated"]),
        usage=UsageTotals.from_json(loads(row["usage"], dict)),
        # keys(): ``in`` on a sqlite3.Row looks among its values.
        steered_into=row["steered_into"] if "steered_into" in row.keys() else None,  # noqa: SIM118
    )


def event_from_row(row: Mapping[str, Any]) -> EventRecord:
    return EventRecord(
        id=row["id"],
        conversation_id=row["conversation_id"],
        ts=row["ts"],
        seq=row["seq"],
        kind=row["kind"],
        data=json.loads(row["data"]),
    )


@record(slots=False)
class ConversationSummary:
    """A conversation as ``acp-bridge conversations`` lists it: the record and how many of its
    messages are in each state (states with none are absent)."""

    record: ConversationRecord
    states: dict[str, int]


@record(slots=False)
class FinishedTurn:
    """What a turn that ran leaves with its message's final state: the agent's reply text
    (already bounded), whether it was cut, what the turn spent, and the cost meter after it."""

    reply: str
    reply_truncated: bool
    usage: UsageTotals
    meter: CostMeter
    meter_changed: bool = True
    """False when the turn left the meter as it found it (nothing to store then, when it
    spent nothing either)."""
