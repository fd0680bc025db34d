"""The relay's id tables. Pure.

*Editor requests* go to the agent with the editor's own ids, unchanged. The bridge's own
requests (re-initialize and restore after a restart) use string ids ``acp-bridge/proxy-N`` and
are only sent while no editor request is in flight on that agent process (the editor's traffic
waits until the restore is over), so the two id spaces cannot collide on one process. An
editor request whose id is already in flight is never forwarded: the relay answers it at once
with an error naming the id (see :func:`~.answers.duplicate_id_error`).

*Agent requests* (``fs/*``, ``terminal/*``, ``session/request_permission``, extensions) reach
the editor under an id the proxy owns, ``acp-bridge/agent-N``, N counted over the proxy's whole
life: unique across agent processes, whatever ids each process chooses. The editor's answer is
mapped back to the agent's own id, and only to the process that asked. So no answer meant for a
dead process can ever match a live request, whatever the size of any table: a restarted agent
that numbers its requests from 1 again gets fresh editor ids, and a late answer to the dead
one's request is an unknown id, dropped with a log line. An agent's ``$/cancel_request`` for
its own request is translated to the editor's id the same way.

Bounds: at most ``max_in_flight`` requests each way (the relay refuses more with an error
response); at most ``max_orphans`` requests of dead processes are remembered (so their late
answers are logged as late rather than unknown), the oldest forgotten first. Forgetting one can
never misroute anything: its id is never used again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from acp_bridge.proxy.frames import IdKey, id_key

__all__ = ["AgentRequests", "EditorRequests", "PendingAgentRequest", "PendingEditorRequest"]

MAX_IN_FLIGHT = 4096
MAX_ORPHANS = 1024
OWN_ID_PREFIX = "acp-bridge/"
CANCEL_REQUEST = "$/cancel_request"


@dataclass(slots=True)
class PendingEditorRequest:
    id: Any
    method: str
    session_id: str | None
    generation: int
    params: dict[str, Any]


class EditorRequests:
    """Editor requests the agent has not answered yet, by id."""

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._pending: dict[IdKey, PendingEditorRequest] = {}
        self._max = max_in_flight

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, key: object) -> bool:
        return key in self._pending

    @property
    def is_full(self) -> bool:
        return len(self._pending) >= self._max

    def add(self, request: PendingEditorRequest) -> None:
        self._pending[id_key(request.id)] = request

    def take(self, key: IdKey) -> PendingEditorRequest | None:
        return self._pending.pop(key, None)

    def take_generation(self, generation: int) -> list[PendingEditorRequest]:
        """Every request in flight on ``generation`` (its process is gone), oldest first."""
        cut = [r for r in self._pending.values() if r.generation == generation]
        for request in cut:
            del self._pending[id_key(request.id)]
        return cut

    def take_all(self) -> list[PendingEditorRequest]:
        everything = list(self._pending.values())
        self._pending.clear()
        return everything


@dataclass(frozen=True, slots=True)
class PendingAgentRequest:
    agent_id: Any
    """The id the agent chose (what its answer must carry)."""
    editor_id: str
    """The id the editor sees: the proxy's own, ``acp-bridge/agent-N``."""
    generation: int
    method: str


class AgentRequests:
    """Agent requests waiting for the editor's answer, by the id the editor sees."""

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT, max_orphans: int = MAX_ORPHANS) -> None:
        self._pending: dict[IdKey, PendingAgentRequest] = {}
        self._by_agent: dict[tuple[int, IdKey], PendingAgentRequest] = {}
        self._orphans: OrderedDict[IdKey, None] = OrderedDict()
        self._max = max_in_flight
        self._max_orphans = max_orphans
        self._issued = 0

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def is_full(self) -> bool:
        return len(self._pending) >= self._max

    @property
    def orphans(self) -> int:
        """Requests of dead processes whose late answers are still recognised as late (at most
        ``max_orphans``)."""
        return len(self._orphans)

    def add(self, generation: int, agent_id: Any, method: str) -> PendingAgentRequest:
        """Register a request; forward it under its ``editor_id``."""
        self._issued += 1
        request = PendingAgentRequest(
            agent_id, f"{OWN_ID_PREFIX}agent-{self._issued}", generation, method
        )
        self._pending[id_key(request.editor_id)] = request
        self._by_agent[generation, id_key(agent_id)] = request
        return request

    def take(self, key: IdKey) -> PendingAgentRequest | None:
        """The request the editor answered; None for a late answer to a dead process's request
        (see :meth:`is_orphan`) or an unknown id (both dropped)."""
        request = self._pending.pop(key, None)
        if request is not None:
            self._forget_agent_id(request)
        return request

    def is_orphan(self, key: IdKey) -> bool:
        """``key`` is a dead process's request, remembered; taking its answer forgets it."""
        return self._orphans.pop(key, 0) is None

    def editor_id(self, generation: int, agent_id: Any) -> str | None:
        """The id the editor knows generation ``generation``'s request ``agent_id`` by."""
        request = self._by_agent.get((generation, id_key(agent_id)))
        return None if request is None else request.editor_id

    def orphan_generation(self, generation: int) -> list[PendingAgentRequest]:
        """The requests of a process that is gone: the editor is told to cancel them, and
        their late answers are dropped."""
        gone = [r for r in self._pending.values() if r.generation == generation]
        for request in gone:
            key = id_key(request.editor_id)
            del self._pending[key]
            self._forget_agent_id(request)
            self._orphans[key] = None
        while len(self._orphans) > self._max_orphans:
            self._orphans.popitem(last=False)
        return gone

    def _forget_agent_id(self, request: PendingAgentRequest) -> None:
        agent_key = (request.generation, id_key(request.agent_id))
        if self._by_agent.get(agent_key) is request:
            del self._by_agent[agent_key]
