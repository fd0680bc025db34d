"""docs/postgres.md's least privileges are enough: a host role with only them opens the store,
queues, owns, runs and logs a conversation, and takes over from a stale owner of the same
role; it cannot change the schema."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore import control
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.conversations import PgConversations
from acp_bridge.pgstore.lease import acquire
from acp_bridge.pgstore.queue import PgQueue
from acp_bridge.pgstore.schema import LATEST_VERSION, migrate
from tests.conversation.stores import AGENT, text

# As docs/postgres.md gives them (ROLE and DB filled in).
HOST_GRANTS = """\
GRANT CONNECT ON DATABASE "{db}" TO {role};
GRANT USAGE ON SCHEMA public TO {role};
GRANT SELECT ON acp_bridge_schema TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON conversations, messages, events, conversation_owners,
    control TO {role};
"""


@pytest.fixture
def host_url(pg: PgConnection, pg_url: str) -> Iterator[str]:
    role = f"acpb_host_{uuid.uuid4().hex[:8]}"
    db = pg_url.split("/")[3].split("?")[0]
    with pg.session("create the host role") as cur:
        cur.execute(f"CREATE ROLE {role} LOGIN".encode())
        cur.execute(f'REVOKE ALL ON DATABASE "{db}" FROM PUBLIC'.encode())
        cur.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        cur.execute(HOST_GRANTS.format(db=db, role=role).encode())
    try:
        yield pg_url.replace("postgresql://postgres@", f"postgresql://{role}@")
    finally:
        with pg.session("drop the host role") as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            cur.execute(f"DROP OWNED BY {role}".encode())
            cur.execute(f"DROP ROLE {role}".encode())


def test_a_host_role_with_the_documented_grants_does_everything_a_host_does(
    host_url: str,
) -> None:
    with (
        PgConnection.open(host_url, owner_tag="h1") as h1,
        PgConnection.open(host_url, owner_tag="h2") as h2,
    ):
        assert migrate(h1) == LATEST_VERSION  # already current: no DDL needed
        PgConversations(h1).create_conversation("d", agent=AGENT, cwd="/w", now=1.0)
        PgQueue(h2).add_message("d", text("hi"), now=2.0)
        lease = acquire(h1, "d")
        assert lease is not None
        queue = PgQueue(h1)
        assert queue.mark_running(lease, 1, now=3.0, event=("turn_started", {}))
        assert queue.finish(lease, 1, "done", stop_reason="end_turn", now=4.0)
        assert [e.kind for e in PgConversations(h2).events("d")] == ["turn_started"]
        asked = control.ask(h2, "d", "stop")  # a verb on another host asks; the owner answers
        assert [r.id for r in control.pending(h1, "d")] == [asked.id]
        assert control.answer(h1, asked.id, {"cancelled": False, "queued": 0})
        assert control.outcome(h2, asked.id) == {"cancelled": False, "queued": 0}
        taken = acquire(h2, "d", stale_after_s=0)  # ends h1's session: same role
        assert taken is not None and taken.generation == lease.generation + 1


def test_a_host_role_cannot_change_the_schema(host_url: str) -> None:
    with PgConnection.open(host_url) as conn:
        denied = pytest.raises(QueueStoreError, match="permission denied")
        with denied, conn.transaction("try DDL") as cur:
            cur.execute("CREATE TABLE intruder (x int)")
