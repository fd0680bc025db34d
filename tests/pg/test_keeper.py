"""The lease keeper: heartbeats keep a lease fresh, and a lost lease is reported at once."""

from __future__ import annotations

import anyio
import pytest

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.keeper import LeaseKeeper
from acp_bridge.pgstore.lease import Lease, acquire

pytestmark = pytest.mark.anyio


def _bump(url: str) -> None:
    """Another owner's generation, as after a take-over (the session is left alone)."""
    with PgConnection.open(url) as other, other.transaction("bump") as cur:
        cur.execute("UPDATE conversation_owners SET generation = generation + 1")


async def test_a_heartbeat_keeps_the_lease_and_reports_a_lost_one_once(pg: PgConnection) -> None:
    lease = acquire(pg, "c")
    assert lease is not None
    lost: list[Lease] = []
    keeper = LeaseKeeper(pg, lost.append)
    keeper.hold(lease)
    assert await keeper.beat() == []
    assert keeper.leases == [lease]
    await anyio.to_thread.run_sync(_bump, pg._url)
    assert await keeper.beat() == [lease]
    assert lost == [lease] and keeper.leases == []
    assert await keeper.beat() == []
    assert lost == [lease]


async def test_a_lease_session_ended_by_the_server_loses_every_lease(pg: PgConnection) -> None:
    lease = acquire(pg, "c")
    assert lease is not None
    lost: list[Lease] = []
    keeper = LeaseKeeper(pg, lost.append)
    keeper.hold(lease)
    with PgConnection.open(pg._url) as other, other.session("end it") as cur:
        cur.execute("SELECT pg_terminate_backend(%s, 5000)", (pg.backend_pid,))
    with pytest.raises(QueueStoreError):
        await keeper.beat()
    assert lost == [lease]


async def test_the_running_keeper_reports_a_take_over_without_being_asked(
    pg: PgConnection,
) -> None:
    lease = acquire(pg, "c")
    assert lease is not None
    reported = anyio.Event()
    keeper = LeaseKeeper(pg, lambda _: reported.set(), interval_s=0.01)
    keeper.hold(lease)
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.run)
        await anyio.to_thread.run_sync(_bump, pg._url)
        with anyio.fail_after(30):
            await reported.wait()
        tg.cancel_scope.cancel()
