"""A conversation's events to its subscribers: bounded queues, a bounded replay backlog.

Every buffer here has a bound, and this is what happens at it:

* The **primary** subscriber (the first to subscribe, unless ``lossless`` says otherwise) never
  loses an event. Its queue holds :data:`SUBSCRIBER_BUFFER` events; when it is full,
  :meth:`EventFanout.publish` waits for the reader. That wait is backpressure on the turn's
  event flow: the turn stops reading the agent's output, the agent's pipe fills, and the agent
  waits too. Nothing piles up in memory. A primary reader must therefore keep reading (or close
  its stream); it must not wait on a conversation operation from the loop that reads, because
  those operations publish events too.
* An **additional** subscriber (``lossless=False``) never slows anything. When its queue is full
  it is disconnected: its stream ends after the events already queued (a log line says so), so
  it sees a clean end, never a silent gap. It may subscribe again with ``replay=True``.
* The **replay backlog** keeps only the latest event of each kind other than ``update`` (the
  agent that started, the session, the last turn boundary, ...): what a late subscriber needs
  to know where things stand. Its size is bounded by the number of kinds, at most
  :data:`BACKLOG_KINDS`; past that the kind seen least recently is forgotten.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acp_bridge.client.events import (
    AgentExited,
    AgentGaveUp,
    AgentRestarting,
    AgentStarted,
    LifecycleEvent,
    SessionReplaced,
    SessionRestored,
)

__all__ = [
    "BACKLOG_KINDS",
    "SUBSCRIBER_BUFFER",
    "ConversationEvent",
    "EventFanout",
    "lifecycle_json",
]

log = logging.getLogger(__name__)

ConversationEvent = dict[str, Any]

SUBSCRIBER_BUFFER: Final = 256
"""Events queued per subscriber before backpressure (primary) or disconnection (additional)."""
BACKLOG_KINDS: Final = 32
"""At most this many kinds are remembered for replay (we emit about fifteen)."""


@dataclass(eq=False)
class _Subscriber:
    send: MemoryObjectSendStream[ConversationEvent]
    lossless: bool


class EventFanout:
    """Publishes each event to every subscriber, in order, under the bounds described above."""

    def __init__(self) -> None:
        self._subscribers: list[_Subscriber] = []
        self._latest: OrderedDict[str, ConversationEvent] = OrderedDict()

    def subscribe(
        self, *, replay: bool = False, lossless: bool | None = None
    ) -> MemoryObjectReceiveStream[ConversationEvent]:
        """A stream of every event from now on (with ``replay``, first the backlog).

        ``lossless`` None means: lossless if no lossless subscriber is connected (the first
        subscriber is the primary one).
        """
        if lossless is None:
            lossless = not any(s.lossless for s in self._subscribers)
        send, receive = anyio.create_memory_object_stream[ConversationEvent](SUBSCRIBER_BUFFER)
        if replay:
            for event in self._latest.values():  # at most BACKLOG_KINDS < SUBSCRIBER_BUFFER
                send.send_nowait(event)
        self._subscribers.append(_Subscriber(send, lossless))
        return receive

    @property
    def subscribed(self) -> bool:
        """Someone subscribed (and has not left yet)."""
        return bool(self._subscribers)

    async def publish(self, event: ConversationEvent) -> None:
        if event["event"] != "update":
            self._remember(event)
        for subscriber in list(self._subscribers):
            try:
                if subscriber.lossless:
                    await subscriber.send.send(event)
                else:
                    subscriber.send.send_nowait(event)
            except anyio.WouldBlock:
                log.warning(
                    "a conversation subscriber fell %d events behind; disconnecting it",
                    SUBSCRIBER_BUFFER,
                )
                self._drop(subscriber)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._drop(subscriber)

    def close(self) -> None:
        """End every subscriber's stream (after the events already queued)."""
        for subscriber in self._subscribers:
            subscriber.send.close()
        self._subscribers.clear()

    def _remember(self, event: ConversationEvent) -> None:
        kind = event["event"]
        self._latest.pop(kind, None)
        self._latest[kind] = event
        while len(self._latest) > BACKLOG_KINDS:
            self._latest.popitem(last=False)

    def _drop(self, subscriber: _Subscriber) -> None:
        subscriber.send.close()
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)


def lifecycle_json(event: LifecycleEvent) -> tuple[str, dict[str, Any]]:
    """An agent lifecycle event as the ``--json`` contract names it."""
    if isinstance(event, AgentStarted):
        return "agent_started", {
            "pid": event.pid,
            "agentInfo": event.agent_info,
            "protocolVersion": event.protocol_version,
            "generation": event.generation,
        }
    if isinstance(event, AgentExited):
        return "agent_exited", {
            "pid": event.pid,
            "returncode": event.returncode,
            "signal": event.signal,
            "reason": event.reason,
            "stderr_tail": event.stderr_tail,
            "will_restart": event.will_restart,
        }
    if isinstance(event, AgentRestarting):
        return "agent_restarted", {"attempt": event.attempt, "delay_s": event.delay_s}
    if isinstance(event, SessionRestored):
        return "session_restored", {"sessionId": event.session_id, "how": event.how}
    if isinstance(event, SessionReplaced):
        return "session_replaced", {"old": event.old, "new": event.new, "reason": event.reason}
    assert isinstance(event, AgentGaveUp)
    return "agent_gave_up", {"reason": event.reason, "history": list(event.history)}
