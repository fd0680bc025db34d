"""``$ACP_BRIDGE_LEASE_STALE_S``: how old another host's heartbeat may grow before this host
takes its conversations over, and the heartbeat interval that follows it (a fifth of the limit
when that is under 2 s). A bad value is refused in one line naming the variable, before any
connection is made."""

from __future__ import annotations

import subprocess
import sys

import pytest

from acp_bridge.errors import QueueStoreError
from acp_bridge.pgstore.lease import (
    HEARTBEAT_INTERVAL_S,
    STALE_AFTER_S,
    STALE_ENV,
    LeaseTiming,
    lease_timing,
)
from acp_bridge.pgstore.store import PgStore
from tests.host.cli_client import ENV, ROOT

NOWHERE = "postgresql://nobody@/db?host=/nonexistent-acpb-socket-dir"


@pytest.mark.parametrize("setting", [None, "", "  "])
def test_unset_is_the_default_limit_and_interval(setting: str | None) -> None:
    timing = lease_timing(setting)
    assert timing == LeaseTiming(STALE_AFTER_S, HEARTBEAT_INTERVAL_S)
    assert (timing.stale_after_s, timing.heartbeat_interval_s) == (15.0, 2.0)


@pytest.mark.parametrize(
    ("setting", "stale", "heartbeat"),
    [
        ("60", 60.0, 2.0),  # a flaky link: slower take-over, same heartbeat
        ("15", 15.0, 2.0),
        (" 10.0 ", 10.0, 2.0),
        ("3", 3.0, 0.6),  # a LAN: the heartbeat follows, five of them within the limit
        ("1", 1.0, 0.2),
    ],
)
def test_a_limit_is_taken_and_the_heartbeat_fits_five_times_in_it(
    setting: str, stale: float, heartbeat: float
) -> None:
    timing = lease_timing(setting)
    assert timing.stale_after_s == stale
    assert timing.heartbeat_interval_s == pytest.approx(heartbeat)
    assert timing.stale_after_s >= 3 * timing.heartbeat_interval_s


@pytest.mark.parametrize("setting", ["abc", "3s", "0.5", "0", "-15", "nan", "inf", "1e400"])
def test_a_value_that_is_no_usable_limit_is_refused_naming_the_variable(setting: str) -> None:
    with pytest.raises(QueueStoreError) as raised:
        lease_timing(setting)
    message = str(raised.value)
    assert f"${STALE_ENV} is {setting!r}" in message
    assert "a number of seconds, at least 1" in message


def test_a_store_is_not_opened_with_a_bad_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The URL leads nowhere: the setting is refused before any connection is tried.
    monkeypatch.setenv(STALE_ENV, "soon")
    with pytest.raises(QueueStoreError, match=rf"\${STALE_ENV} is 'soon'"):
        PgStore.open(NOWHERE)


def test_a_command_given_a_bad_limit_says_so_in_one_line_and_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "status", "--store", NOWHERE],
        capture_output=True, text=True, cwd=ROOT, env={**ENV, STALE_ENV: "0.1"}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"${STALE_ENV} is '0.1'" in done.stderr
    assert "Traceback" not in done.stderr
