"""Every anyio test runs on asyncio (in debug mode) and on trio.

A module that touches asyncio-only code (litellm, the official ACP SDK runtime) pins itself with
``pytestmark = pytest.mark.parametrize("anyio_backend", ["asyncio"])``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.pg_server import FreshDatabases, PgServer, no_server_reason, start_server

# CI machines are small and shared: judge properties, not generation speed.
settings.register_profile("acp-bridge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("acp-bridge")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # tests import the fixtures package helpers
    sys.path.insert(0, str(ROOT))


def _anyio_socket_wakeup_race(context: dict[str, Any]) -> bool:
    """Whether an asyncio loop error is anyio's known race on a Unix socket, not ours.

    anyio 4.16's ``UNIXSocketStream`` waits for a readable (writable) socket with
    ``loop.add_reader(sock, future.set_result, None)``. When the socket becomes ready in the
    same pass of the event loop in which the waiting task is cancelled (a connection closed
    while its peer writes), the reader's callback runs after the future was cancelled, and
    ``set_result`` raises ``InvalidStateError`` inside the loop. Nothing is lost: the
    receive was abandoned anyway, and anyio removes the reader in the future's done
    callback. asyncio reports it to the loop's exception handler, and anyio's test runner
    fails whichever test was running. Only exactly that case is let through here: the
    callback is ``set_result`` of a future that is cancelled."""
    callback = getattr(context.get("handle"), "_callback", None)
    future = getattr(callback, "__self__", None)
    return (
        isinstance(context.get("exception"), asyncio.InvalidStateError)
        and getattr(callback, "__name__", "") == "set_result"
        and isinstance(future, asyncio.Future)
        and future.cancelled()
    )


def _install_race_filter() -> None:
    from anyio._backends import _asyncio as anyio_asyncio

    runner = anyio_asyncio.TestRunner
    original = runner._exception_handler

    def exception_handler(
        self: Any, loop: asyncio.AbstractEventLoop, context: dict[str, Any]
    ) -> None:
        if not _anyio_socket_wakeup_race(context):
            original(self, loop, context)

    runner._exception_handler = exception_handler  # type: ignore[method-assign]


_install_race_filter()


def pytest_configure(config: pytest.Config) -> None:
    """Give the processes the suite starts a deliverable SIGINT, whatever started the suite.

    Tests send SIGINT to the bridges they start, and a bridge keeps a signal it inherited as
    ignored (issue 21, item 8). A shell starts a background job (``pytest &`` in a script or a
    CI step) with SIGINT ignored, every process started from it inherits that, and those tests
    then failed after their 30 s bound. A test about an inherited ignored SIGINT sets it itself.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker more than the CPUs this process may run on.

    Much of a worker's time is spent waiting, not computing: on the agents, hosts, proxies and
    PostgreSQL servers its tests start, and on the bounds some tests prove (a grace window, a
    heartbeat). With one worker per CPU those waits left the CPUs idle for a large part of the
    run; one more worker fills them. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` (pytest-xdist's own
    variable) still decides when it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else None


def _declared_timeout(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return 0.0
    bound = marker.args[0] if marker.args else marker.kwargs.get("timeout", 0)
    return float(bound or 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that declare a longer bound than the suite's (``pytest.mark.timeout``: agent
    processes importing litellm, the demo, the soak smoke, the Node peers) go first, longest
    bound first; the rest keep their order. Under xdist they then start while there is other
    work to share, instead of one ending up alone in the last half minute of the run."""
    items.sort(key=lambda item: -_declared_timeout(item))  # stable


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"debug": True}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    backend: tuple[str, dict[str, object]] = request.param
    return backend


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server per test session (per xdist worker), started on first use
    (see :mod:`tests.pg_server`); skipped, saying why, where none can run."""
    reason = no_server_reason()
    if reason is not None:
        pytest.skip(reason)
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_databases(pg_server: PgServer) -> Iterator[FreshDatabases]:
    """New databases on the session's server, the next one made while a test runs."""
    databases = FreshDatabases(pg_server)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def pg_url(pg_server: PgServer, pg_databases: FreshDatabases) -> Iterator[str]:
    """A new, empty database of its own for the test; dropped afterwards (its connections
    with it)."""
    name = pg_databases.take()
    try:
        yield pg_server.url(name)
    finally:
        pg_databases.drop(name)
