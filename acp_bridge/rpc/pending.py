"""The table of our requests that await a response. Pure: no I/O, no anyio.

Each entry is a :class:`PendingCall` whose ``wake`` callback is supplied by the caller (the peer
passes ``anyio.Event.set``), so the table decides and the peer waits. Every path removes the
entry: a response pops it, :meth:`PendingTable.discard` is called from the requester's
``finally``, and :meth:`PendingTable.fail_all` empties the table when the connection ends.
Once failed, the table refuses new calls with the same error, so nothing can start waiting on a
dead connection.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from acp_bridge.wire.jsonrpc import RequestId, Response

__all__ = ["PendingCall", "PendingTable"]


@dataclass(slots=True)
class PendingCall:
    """One outgoing request awaiting its response."""

    id: RequestId
    method: str
    wake: Callable[[], None] = field(repr=False)
    response: Response | None = None
    failure: BaseException | None = None

    @property
    def is_settled(self) -> bool:
        return self.response is not None or self.failure is not None

    def settle(
        self, response: Response | None = None, failure: BaseException | None = None
    ) -> bool:
        """Record the outcome once; later outcomes are ignored. Returns whether this one won."""
        if self.response is not None or self.failure is not None:  # is_settled, inlined
            return False
        self.response = response
        self.failure = failure
        self.wake()
        return True


class PendingTable:
    """Allocates request ids and matches responses to the calls awaiting them.

    Ids are integers counting from 1, or ``f"{prefix}{n}"`` strings when ``id_prefix`` is set:
    the proxy gives the bridge's own requests a string space so they can never collide with ids
    chosen by the editor it relays for.
    """

    def __init__(self, *, id_prefix: str | None = None) -> None:
        self._id_prefix = id_prefix
        self._counter = itertools.count(1)
        self._calls: dict[RequestId, PendingCall] = {}
        self._closed_by: BaseException | None = None

    def __len__(self) -> int:
        return len(self._calls)

    def __repr__(self) -> str:
        state = "closed" if self._closed_by is not None else "open"
        return f"<PendingTable [{state}, {len(self._calls)} pending]>"

    @property
    def closed_by(self) -> BaseException | None:
        """The error every call fails with once the connection ended, else None."""
        return self._closed_by

    def add(self, method: str, wake: Callable[[], None]) -> PendingCall:
        """Register a new call under a fresh id.

        Raises:
            BaseException: the error the table was closed with (see :meth:`fail_all`).
        """
        if self._closed_by is not None:
            raise self._closed_by
        n = next(self._counter)
        call_id: RequestId = n if self._id_prefix is None else f"{self._id_prefix}{n}"
        call = PendingCall(call_id, method, wake)
        self._calls[call_id] = call
        return call

    def resolve(self, response: Response) -> PendingCall | None:
        """Hand a response to its call. Returns None for an id nobody waits for."""
        call = self._calls.pop(response.id, None)
        if call is not None:
            call.settle(response=response)
        return call

    def discard(self, call_id: RequestId) -> None:
        """Forget a call (its requester stopped waiting); a late response will be dropped."""
        self._calls.pop(call_id, None)

    def fail_all(self, failure: BaseException) -> int:
        """Fail every pending call at once and refuse new ones. Returns how many failed.

        Only the first failure is kept as the reason for refusing later calls.
        """
        if self._closed_by is None:
            self._closed_by = failure
        calls = list(self._calls.values())
        self._calls.clear()
        for call in calls:
            call.settle(failure=failure)
        return len(calls)
