"""The test server itself: it starts, answers, and its teardown leaves no process behind."""

from __future__ import annotations

import psutil
import psycopg

from tests.pg_server import start_server


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_stopping_a_throwaway_server_leaves_no_process_of_it_behind() -> None:
    server = start_server()
    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert backend is not None
        pids = [server.pid, *(p.pid for p in psutil.Process(server.pid).children(recursive=True))]
        assert len(pids) > 1  # the postmaster and its background workers
    finally:
        server.stop()
    assert [pid for pid in pids if _alive(pid)] == []
    assert not server.root.exists()
    assert server.guard.poll() is not None


def test_a_server_whose_test_process_dies_is_stopped_by_its_guard() -> None:
    server = start_server()
    try:
        assert server.guard.stdin is not None
        server.guard.stdin.close()  # as when the test process dies: end-of-file
        assert server.guard.wait(timeout=60) == 0
        assert server.process.wait(timeout=60) is not None
        assert not server.root.exists()  # the guard removed it too
    finally:
        server.stop()
    assert not _alive(server.pid)
