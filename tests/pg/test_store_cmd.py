"""``acp-bridge store migrate``: creates and upgrades the schema, idempotent, refuses a newer one,
and never shows a password."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_bridge.cli.main import main
from acp_bridge.pgstore.connection import PgConnection
from acp_bridge.pgstore.schema import LATEST_VERSION, version_of


def _with_password(url: str, password: str) -> str:
    # The test server trusts every local connection: the password is carried, never checked.
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{password}@")


def test_migrate_creates_the_schema_then_changes_nothing(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "migrate", "--store", pg_url]) == 0
    assert f"migrated from schema version 0 to {LATEST_VERSION}" in capsys.readouterr().out
    assert main(["store", "migrate", "--store", pg_url]) == 0
    assert f"already at schema version {LATEST_VERSION}" in capsys.readouterr().out
    with PgConnection.open(pg_url) as conn:
        assert version_of(conn) == LATEST_VERSION


def test_the_store_may_come_from_the_environment_and_no_password_is_shown(
    pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "pa55-w0rd"
    monkeypatch.setenv("ACP_BRIDGE_STORE", _with_password(pg_url, secret))
    assert main(["store", "migrate"]) == 0
    out, err = capsys.readouterr()
    assert "postgres:***@" in out and secret not in out + err
    assert "visible" not in err  # the environment is not the command line
    assert main(["store", "migrate", "--store", _with_password(pg_url, secret)]) == 0
    out, err = capsys.readouterr()
    assert secret not in out + err and "visible to other users in ps" in err


def test_a_newer_schema_is_refused_with_exit_2(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["store", "migrate", "--store", pg_url]) == 0
    with PgConnection.open(pg_url) as conn, conn.transaction("pretend") as cur:
        cur.execute("UPDATE acp_bridge_schema SET version = 42")
    assert main(["store", "migrate", "--store", pg_url]) == 2
    assert "newer acp-bridge (store schema version 42" in capsys.readouterr().err


def test_an_unreachable_server_is_exit_2_without_the_password(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _with_password(pg_url, "hunter2").replace("port=", "port=1")
    assert main(["store", "migrate", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "could not connect" in err and "hunter2" not in err and "***" in err


def test_a_sqlite_store_is_migrated_by_opening_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.db"
    assert main(["store", "migrate", "--store", str(path)]) == 0
    assert "SQLite store at schema version" in capsys.readouterr().out
    assert path.stat().st_mode & 0o777 == 0o600
