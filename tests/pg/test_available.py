"""Whether the PostgreSQL tests run here: where they cannot (no PostgreSQL binaries, or no
psycopg), the others in this directory are not collected and this test is skipped with the one
line that says why."""

from __future__ import annotations

import pytest

from tests.pg_server import no_server_reason


def test_postgresql_tests_run_here() -> None:
    reason = no_server_reason()
    if reason is not None:
        pytest.skip(reason)
