"""Connection loss, retried within a bound: the session is opened again and the work that was
lost before its commit runs again (the server rolled it back, so it happens once).

Only work that is not part of a batch is run again: a batch's calls are the caller's block,
which the caller (the conversation's group commit) runs again call by call when the batch
fails, each through here. Work lost while committing (:attr:`ConnectionLostError.maybe_committed`)
is not run again, since it may have committed: the session is opened again for what comes
next, and the error is raised.

Everything here runs in a worker thread (the store's calls are synchronous): it sleeps with
``time.sleep``, briefly, between attempts to open the session again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TypeVar

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.connection import ConnectionLostError, PgConnection

__all__ = ["RECONNECT_BOUND_S", "reopen", "retrying"]

_T = TypeVar("_T")

RECONNECT_BOUND_S: Final = 10.0
"""How long a lost session is tried again (opened, and its work run again) before the loss is
raised to the caller."""
_FIRST_DELAY_S: Final = 0.05
_MAX_DELAY_S: Final = 1.0


def retrying(
    conn: PgConnection,
    work: Callable[[], _T],
    *,
    bound_s: float = RECONNECT_BOUND_S,
    clock: Callable[[], float] = time.monotonic,
) -> _T:
    """``work()``; when ``conn``'s session is lost under it, open the session again and run it
    again, for at most ``bound_s`` (see the module's text).

    Raises:
        ConnectionLostError: the session could not be opened again within the bound, or the
            work was lost while committing (the session is open again for the next call), or
            it was part of a batch.
    """
    deadline = clock() + bound_s
    while True:
        try:
            return work()
        except ConnectionLostError as exc:
            if conn.in_batch:
                raise
            reopen(conn, exc, deadline=deadline, clock=clock)
            if exc.maybe_committed:
                raise


def reopen(
    conn: PgConnection,
    lost: ConnectionLostError,
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Open ``conn``'s session again (at once, then with a growing pause) until ``deadline``.

    Raises:
        ConnectionLostError: ``lost``, when the deadline passed first.
    """
    delay = _FIRST_DELAY_S
    while True:
        try:
            conn.reconnect()
            return
        except QueueStoreError as exc:
            if clock() + delay > deadline:
                raise lost from exc
        time.sleep(delay)
        delay = min(delay * 2, _MAX_DELAY_S)
