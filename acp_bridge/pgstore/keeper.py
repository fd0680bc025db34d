"""The owner's side of lease liveness: refresh the heartbeat of every lease a host holds, and
say at once which were lost. See :mod:`.lease` for why a heartbeat is needed (a stopped owner
keeps its session and its advisory locks) and how another host uses it.

:class:`LeaseKeeper` runs one loop per host (``await tg.start(keeper.run)``): every
``interval_s`` it refreshes all its leases in one statement on the lease session, in a worker
thread. A lease whose generation moved on is reported through ``on_lost`` and forgotten; the
host must stop that conversation's turn at once (its writes would be fenced anyway). When the
lease session itself fails (the server ended it: every advisory lock on it is gone), every
lease is reported lost, and :meth:`LeaseKeeper.run` opens the session again (within
:data:`~.retry.RECONNECT_BOUND_S`) and goes on: the host keeps serving, and may own
conversations again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import anyio
from anyio.abc import TaskStatus

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import ConnectionLostError, PgConnection
from acp_bridge.pgstore.lease import HEARTBEAT_INTERVAL_S, Lease, heartbeat
from acp_bridge.pgstore.retry import RECONNECT_BOUND_S, reopen

__all__ = ["LeaseKeeper"]


class LeaseKeeper:
    """Keeps the heartbeat of the leases held on ``conn`` (the session that acquired them)."""

    def __init__(
        self,
        conn: PgConnection,
        on_lost: Callable[[Lease], None],
        *,
        interval_s: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self._conn = conn
        self._on_lost = on_lost
        self._interval_s = interval_s
        self._leases: dict[str, Lease] = {}

    def hold(self, lease: Lease) -> None:
        """Keep ``lease`` alive from now on (it was just acquired on the keeper's session)."""
        self._leases[lease.conversation_id] = lease

    def forget(self, conversation_id: str) -> None:
        """Stop keeping the conversation's lease (released, or handed back)."""
        self._leases.pop(conversation_id, None)

    @property
    def leases(self) -> list[Lease]:
        return list(self._leases.values())

    async def beat(self) -> list[Lease]:
        """One heartbeat of every lease held; the lost ones, reported and forgotten.

        Raises:
            QueueStoreError: the lease session failed (every lease reported lost first).
        """
        held = self.leases
        try:
            lost = await anyio.to_thread.run_sync(partial(heartbeat, self._conn, held))
        except QueueStoreError:
            self._lose([lease for lease in held if lease.conversation_id in self._leases])
            raise
        self._lose([lease for lease in lost if self._leases.get(lease.conversation_id) == lease])
        return lost

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Beat every ``interval_s`` until cancelled. A lease session found lost (every lease
        on it reported lost) is opened again, within the reconnect bound.

        Raises:
            QueueStoreError: the lease session failed otherwise, or could not be opened again.
        """
        task_status.started()
        while True:
            try:
                await self.beat()
            except ConnectionLostError as exc:
                deadline = time.monotonic() + RECONNECT_BOUND_S
                await anyio.to_thread.run_sync(partial(reopen, self._conn, exc, deadline=deadline))
            await anyio.sleep(self._interval_s)

    def _lose(self, lost: list[Lease]) -> None:
        for lease in lost:
            self._leases.pop(lease.conversation_id, None)
            self._on_lost(lease)
