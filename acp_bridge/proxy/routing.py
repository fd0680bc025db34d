"""The relay's id tables. Pure.

*Editor requests* go to the agent with the editor's own ids, unchanged. The bridge's own
requests (re-initialize and restore after a restart) use string ids ``acp-bridge/proxy-N`` and
are only sent while no editor request is in flight on that agent process (the editor's traffic
waits until the restore is over), so the two id spaces cannot collide on one process.

*Agent requests* (``fs/*``, ``terminal/*``, ``session/request_permission``, extensions) reach
the editor with the agent's ids, unchanged, except when such an id is still in use toward the
editor: a request of a dead agent process that the editor has not answered yet (it was
cancelled with ``$/cancel_request``, its late answer must be dropped), or a duplicate. Then the
request is forwarded under a fresh id ``acp-bridge/agent-N`` and the answer mapped back.

Bounds: at most ``max_in_flight`` requests each way (the relay refuses more with an error
response); at most ``max_orphans`` cancelled requests are remembered, the oldest forgotten
first (a forgotten one's late answer is then an unknown id, dropped with a log line).
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
    editor_id: Any
    """The id the editor sees: the agent's, unless it had to be replaced."""
    generation: int
    method: str

    @property
    def rewritten(self) -> bool:
        return id_key(self.editor_id) != id_key(self.agent_id)


class AgentRequests:
    """Agent requests waiting for the editor's answer, by the id the editor sees."""

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT, max_orphans: int = MAX_ORPHANS) -> None:
        self._pending: dict[IdKey, PendingAgentRequest] = {}
        self._orphans: OrderedDict[IdKey, None] = OrderedDict()
        self._max = max_in_flight
        self._max_orphans = max_orphans
        self._fresh = 0

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def is_full(self) -> bool:
        return len(self._pending) >= self._max

    def add(self, generation: int, agent_id: Any, method: str) -> PendingAgentRequest:
        """Register a request; its ``editor_id`` says which id to forward it under."""
        key = id_key(agent_id)
        editor_id = agent_id
        if key in self._pending or key in self._orphans:
            self._fresh += 1
            editor_id = f"{OWN_ID_PREFIX}agent-{self._fresh}"
            key = id_key(editor_id)
        request = PendingAgentRequest(agent_id, editor_id, generation, method)
        self._pending[key] = request
        return request

    def take(self, key: IdKey) -> PendingAgentRequest | None:
        """The request the editor answered; None for a cancelled one's late answer or an
        unknown id (both dropped)."""
        if key in self._orphans:
            del self._orphans[key]
            return None
        return self._pending.pop(key, None)

    @property
    def orphans(self) -> int:
        """Cancelled requests whose late answers are still recognised (at most ``max_orphans``)."""
        return len(self._orphans)

    def orphan_generation(self, generation: int) -> list[PendingAgentRequest]:
        """The requests of a process that is gone: the editor is told to cancel them, and
        their late answers are dropped."""
        gone = [r for r in self._pending.values() if r.generation == generation]
        for request in gone:
            key = id_key(request.editor_id)
            del self._pending[key]
            self._orphans[key] = None
        while len(self._orphans) > self._max_orphans:
            self._orphans.popitem(last=False)
        return gone
