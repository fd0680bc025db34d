"""The benchmark budgets as a table (scripts/bench/budgets.py), judged on hand-made samples."""

from __future__ import annotations

from scripts.bench.budgets import CAUSES, MB_IN_MIB, TABLE, Budget, Values, budgets


def judged(values: Values, notes: dict[str, str] | None = None) -> dict[str, Budget]:
    return {row.name: row for row in budgets(values, notes or {})}


def test_nothing_measured_gives_every_budget_in_table_order_as_not_measured() -> None:
    rows = budgets({}, {})
    assert [row.name for row in rows] == [rule.name for rule in TABLE]
    assert len({rule.name for rule in TABLE}) == len(TABLE)
    assert {(row.measured, row.verdict, row.cause) for row in rows} == {("–", "not measured", "")}
    replay = next(row for row in rows if row.name == "replay")
    assert replay.budget.startswith("`session/load` replay linear up to 0 updates")


def test_the_median_is_judged_against_the_limit_and_a_miss_carries_its_cause() -> None:
    rows = judged({"stream.ratio": [1.0, 2.5, 3.0], "proxy.throughput_ratio": [0.8, 0.85, 0.95]})
    assert (rows["stream_ratio"].measured, rows["stream_ratio"].verdict) == ("2.50x", "pass")
    assert rows["stream_ratio"].cause == ""
    assert (rows["proxy_ratio"].measured, rows["proxy_ratio"].verdict) == ("0.850x", "miss")
    assert rows["proxy_ratio"].cause == CAUSES["proxy_ratio"]


def test_memory_is_sampled_in_mib_and_judged_and_shown_in_mb() -> None:
    under, over = 49.9 * MB_IN_MIB, 50.1 * MB_IN_MIB  # MiB just either side of 50 MB
    assert judged({"memory.1.bridge_mib": [under]})["memory_one"].measured == "49.9 MB"
    assert judged({"memory.1.bridge_mib": [under]})["memory_one"].verdict == "pass"
    assert judged({"memory.1.bridge_mib": [over]})["memory_one"].verdict == "miss"
    extra = judged({"memory.per_extra_agent_mib": [1.0]})["memory_extra"]
    assert (extra.measured, extra.verdict) == (f"+{1 / MB_IN_MIB:.2f} MB", "pass")


def test_derived_figures_combine_several_samples() -> None:
    rows = judged(
        {
            "cancel.ours_total_ms": [10.0],
            "cancel.sdk_total_ms": [12.5],
            "cancel.sdk_own_total_ms": [8.0],
            "grace.0.5.error_ms": [-30.0],
            "grace.1.error_ms": [20.0],
            "replay.1000.ours_s": [0.1],
            "replay.10000.ours_s": [1.2],
            "startup.heavy_modules_imported": [1.0],
        },
        {"startup.heavy_modules": "litellm"},
    )
    cancel = rows["cancel_vs_sdk"]  # like for like: the SDK's agent in a session of its own
    assert cancel.measured == "1.25x (its agent in the caller's session: 0.80x)"
    assert cancel.verdict == "miss"
    assert (rows["grace"].measured, rows["grace"].verdict) == ("+30.0 ms (worst window)", "pass")
    replay = rows["replay"]
    assert replay.budget.startswith("`session/load` replay linear up to 10,000 updates")
    assert (replay.measured, replay.verdict) == ("1.20x", "pass")
    assert (rows["imports"].measured, rows["imports"].verdict) == ("imports litellm", "miss")
    assert judged({"startup.heavy_modules_imported": [0.0]})["imports"].measured == "neither"
