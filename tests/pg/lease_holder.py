"""A host that holds a conversation's lease, for the partition test: run as
``python -m tests.pg.lease_holder URL``.

It takes the lease of conversation "c" and prints ``{"generation", "pid"}`` (its session's
server pid) as one JSON line; then waits for a line on stdin (the test stops it with SIGSTOP
meanwhile, lets another host take over, and continues it) and tries to start message 1 with its
old lease: on its old session, then on a new one. It prints what each attempt raised.
"""

from __future__ import annotations

import json
import sys

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.lease import acquire
from acp_bridge.pgstore.queue import PgQueue


def _attempt(conn: PgConnection, lease: object) -> str:
    try:
        PgQueue(conn).mark_running(lease, 1, now=9.0)  # type: ignore[arg-type]
    except QueueStoreError as exc:
        return type(exc).__name__
    return "wrote"


def main(url: str) -> None:
    conn = PgConnection.open(url, owner_tag="partitioned")
    lease = acquire(conn, "c")
    assert lease is not None
    print(json.dumps({"generation": lease.generation, "pid": conn.backend_pid}), flush=True)
    sys.stdin.readline()
    outcome = {"old_session": _attempt(conn, lease)}
    with PgConnection.open(url, owner_tag="partitioned") as again:
        outcome["new_session"] = _attempt(again, lease)
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
