"""A proxy recording as a fake agent's script. Pure.

The agent's side of a recording (``bridge->agent`` and ``agent->bridge`` lines, up to the
agent's first exit) becomes a list of *exchanges*: a message the agent received, and what it
sent after it until the next one. :class:`ReplayScript` serves them: each message a live client
sends must match the next exchange's -- a request or notification by method, a response by the
id of the request it answers -- and gets that exchange's messages back, a response to a
recorded request carrying the live request's id. Anything else is a *divergence*: the replay
names what it expected and what came, and stops.

What the agent wrote before the first message it received (a banner notification) is sent at
once. Contents are not compared (a prompt's text may differ); order and methods are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from acp_bridge.proxy.recording import NotJsonError, loads_strict

__all__ = ["Divergence", "Exchange", "RecordingError", "ReplayScript", "load_exchanges"]


class RecordingError(ValueError):
    """The recording cannot be read (not NDJSON of ``--record``, or nothing of an agent in it)."""


@dataclass
class Exchange:
    incoming: dict[str, Any] | None
    outgoing: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Divergence:
    message: str


_ENDS = ("agent_exited", "recording_stopped")
"""Events after which the recording no longer holds the first agent's side."""


def load_exchanges(lines: Iterable[str | bytes], *, allow_partial: bool = False) -> list[Exchange]:
    """The agent's side of a recording, up to the agent's first exit (or the recording's stop).

    ``lines`` are as read, each with its newline: only the last line of a file can lack one,
    and such a line that is not JSON was cut by a writer that died (a full disk, a crash).
    ``allow_partial`` skips it; otherwise it is refused like any line that is not strict JSON
    (:func:`~.recording.loads_strict`: no NaN, no nesting past its bound).

    Raises:
        RecordingError: naming the first line that cannot be used, or the lack of agent traffic.
    """
    exchanges = [Exchange(None)]
    seen_agent = False
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            entry = loads_strict(text)
        except NotJsonError as exc:
            if not _has_newline(text):
                if allow_partial:
                    break
                raise RecordingError(
                    f"its last line ({number}) is cut: the file ends inside it "
                    "(--allow-partial skips it)"
                ) from None
            raise RecordingError(f"line {number} is not JSON: {exc}") from None
        if not isinstance(entry, dict):
            raise RecordingError(f"line {number} is not a recording entry")
        direction = entry.get("dir")
        event = entry.get("event")
        if direction == "bridge" and isinstance(event, dict) and event.get("event") in _ENDS:
            break
        message = entry.get("msg")
        if direction not in ("bridge->agent", "agent->bridge") or not isinstance(message, dict):
            continue
        seen_agent = True
        if direction == "bridge->agent":
            exchanges.append(Exchange(message))
        else:
            exchanges[-1].outgoing.append(message)
    if not seen_agent:
        raise RecordingError("no agent traffic in it (was it made with acp-bridge proxy --record?)")
    return exchanges


def _has_newline(text: str | bytes) -> bool:
    return text.endswith(b"\n") if isinstance(text, bytes) else text.endswith("\n")


def _kind(message: dict[str, Any]) -> str:
    if isinstance(message.get("method"), str):
        return "request" if "id" in message else "notification"
    return "response"


def _describe(message: dict[str, Any] | None) -> str:
    if message is None:
        return "nothing (the recording ended)"
    kind = _kind(message)
    if kind == "response":
        return f"a response to request {json.dumps(message.get('id'))}"
    return f"{message['method']} ({kind})"


class ReplayScript:
    def __init__(self, exchanges: list[Exchange]) -> None:
        self._exchanges = exchanges
        self._position = 1
        self._live_ids: dict[str, Any] = {}
        """Recorded request id (as JSON) -> the live client's id for the same request."""

    @property
    def prologue(self) -> list[dict[str, Any]]:
        return list(self._exchanges[0].outgoing)

    @property
    def finished(self) -> bool:
        return self._position >= len(self._exchanges)

    @property
    def progress(self) -> str:
        return f"{self._position - 1} of {len(self._exchanges) - 1} recorded messages"

    def receive(self, message: dict[str, Any]) -> list[dict[str, Any]] | Divergence:
        """What to send back for the client's ``message``, or why it diverged."""
        expected = None if self.finished else self._exchanges[self._position].incoming
        if expected is None or not self._matches(expected, message):
            return Divergence(
                f"replay diverged after {self.progress}: expected {_describe(expected)}, "
                f"got {_describe(message)}"
            )
        self._position += 1
        if _kind(expected) == "request":
            self._live_ids[json.dumps(expected.get("id"))] = message.get("id")
        return [self._with_live_id(m) for m in self._exchanges[self._position - 1].outgoing]

    def _matches(self, expected: dict[str, Any], message: dict[str, Any]) -> bool:
        kind = _kind(expected)
        if kind != _kind(message):
            return False
        if kind == "response":
            return json.dumps(expected.get("id")) == json.dumps(message.get("id"))
        return bool(expected.get("method") == message.get("method"))

    def _with_live_id(self, message: dict[str, Any]) -> dict[str, Any]:
        if _kind(message) != "response":
            return message
        key = json.dumps(message.get("id"))
        if key not in self._live_ids:
            return message
        return {**message, "id": self._live_ids[key]}
