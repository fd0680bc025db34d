"""The restart policy, driven with made-up exit histories: no processes, no clocks, no sleeps."""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.process.policy import (
    ExitRecord,
    GiveUp,
    Restart,
    RestartPolicy,
    format_exit_history,
)

QUICK_S = 0.1  # an uptime well under any reset threshold used here


def crash(at_s: float, uptime_s: float = QUICK_S, reason: str = "exited with code 1") -> ExitRecord:
    return ExitRecord(at_s=at_s, uptime_s=uptime_s, returncode=1, signal=None, reason=reason)


def killed(at_s: float, uptime_s: float = QUICK_S) -> ExitRecord:
    return ExitRecord(at_s, uptime_s, returncode=None, signal=9, reason="killed by SIGKILL")


def decisions(policy: RestartPolicy, exits: Iterable[ExitRecord]) -> list[Restart | GiveUp]:
    """Feed ``exits`` one at a time, deciding at the moment of each, as a supervisor would."""
    history: list[ExitRecord] = []
    out = []
    for record in exits:
        history.append(record)
        out.append(policy.decide(history, now=record.at_s))
    return out


def delays(policy: RestartPolicy, exits: Iterable[ExitRecord]) -> list[float]:
    out = []
    for decision in decisions(policy, exits):
        assert isinstance(decision, Restart)
        out.append(decision.delay_s)
    return out


# -- backoff ---------------------------------------------------------------------------------


def test_quick_failures_double_the_delay_until_the_cap() -> None:
    policy = RestartPolicy(max_restarts=100)
    got = delays(policy, (crash(float(t)) for t in range(10)))
    assert got == [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_the_first_restart_of_a_run_waits_first_delay_s() -> None:
    policy = RestartPolicy(first_delay_s=0.1, max_restarts=100)
    assert delays(policy, (crash(float(t)) for t in range(3))) == [0.1, 0.25, 0.5]


def test_attempts_count_up_from_one() -> None:
    got = decisions(RestartPolicy(), [crash(1.0), crash(2.0), crash(3.0)])
    assert got == [Restart(0.0, 1), Restart(0.25, 2), Restart(0.5, 3)]


def test_the_multiplier_and_cap_are_settings() -> None:
    policy = RestartPolicy(initial_delay_s=1.0, multiplier=3.0, max_delay_s=10.0, max_restarts=9)
    assert delays(policy, (crash(float(t)) for t in range(5))) == [0.0, 1.0, 3.0, 9.0, 10.0]


def test_a_zero_initial_delay_restarts_at_once_every_time() -> None:
    policy = RestartPolicy(initial_delay_s=0.0, max_restarts=50)
    assert delays(policy, (crash(float(t)) for t in range(40))) == [0.0] * 40


def test_a_huge_attempt_number_is_capped_not_an_overflow() -> None:
    assert RestartPolicy().delay_for(100_000) == 30.0
    with pytest.raises(ValueError, match="attempt"):
        RestartPolicy().delay_for(0)


# -- reset after sustained uptime ------------------------------------------------------------


def test_a_long_run_before_the_exit_resets_backoff_and_count() -> None:
    policy = RestartPolicy(max_restarts=3)
    exits = [crash(1.0), crash(2.0), crash(3.0), crash(100.0, uptime_s=60.0), crash(101.0)]
    assert decisions(policy, exits) == [
        Restart(0.0, 1),
        Restart(0.25, 2),
        Restart(0.5, 3),
        # Without the reset this would be the 4th exit in the window: over max_restarts=3.
        Restart(0.0, 1),
        Restart(0.25, 2),
    ]


def test_an_uptime_just_under_the_threshold_does_not_reset() -> None:
    policy = RestartPolicy(max_restarts=9)
    exits = [crash(1.0), crash(2.0), crash(70.0, uptime_s=59.99)]
    assert decisions(policy, exits)[-1] == Restart(0.5, 3)


def test_exits_before_a_reset_never_count_again_even_inside_the_window() -> None:
    policy = RestartPolicy(max_restarts=2, window_s=1000.0)
    exits = [crash(1.0), crash(2.0), crash(70.0, uptime_s=65.0), crash(71.0)]
    assert decisions(policy, exits)[-1] == Restart(0.25, 2)


# -- the window ------------------------------------------------------------------------------


def test_exits_older_than_the_window_fall_out_of_the_count() -> None:
    policy = RestartPolicy(max_restarts=2, window_s=10.0)
    assert isinstance(decisions(policy, [crash(0.0), crash(1.0), crash(2.0)])[-1], GiveUp)
    # The same three exits spread wider: at 12 only the exits after t=2 are in the window.
    got = decisions(policy, [crash(0.0), crash(2.0), crash(12.0)])
    # The window only limits the count; the backoff keeps growing until a reset.
    assert got == [Restart(0.0, 1), Restart(0.25, 2), Restart(0.5, 3)]


def test_an_exit_exactly_one_window_ago_is_out_of_it() -> None:
    policy = RestartPolicy(max_restarts=1, window_s=10.0)
    assert decisions(policy, [crash(0.0), crash(10.0)])[-1] == Restart(0.25, 2)
    assert isinstance(decisions(policy, [crash(0.0), crash(9.999)])[-1], GiveUp)


def test_decide_judges_the_window_at_now_not_at_the_last_exit() -> None:
    policy = RestartPolicy(max_restarts=1, window_s=10.0)
    history = [crash(0.0), crash(5.0)]
    assert isinstance(policy.decide(history, now=5.0), GiveUp)
    assert policy.decide(history, now=10.5) == Restart(0.25, 2)


def test_an_infinite_window_caps_restarts_for_good_and_infinite_reset_never_resets() -> None:
    policy = RestartPolicy(max_restarts=2, window_s=math.inf, reset_after_uptime_s=math.inf)
    exits = [crash(0.0, uptime_s=1e6), crash(1e9, uptime_s=1e6), crash(2e9, uptime_s=1e6)]
    got = decisions(policy, exits)
    assert got[:2] == [Restart(0.0, 1), Restart(0.25, 2)]
    assert isinstance(got[2], GiveUp)
    assert got[2].reason == "the agent exited 3 times (last: exited with code 1); giving up"


# -- giving up -------------------------------------------------------------------------------


def test_past_the_cap_it_gives_up_with_the_whole_history_and_a_clear_reason() -> None:
    policy = RestartPolicy()  # 5 restarts in 300 s
    # A resetting exit (long uptime) starts the run and counts; four quick ones; then a kill.
    exits = [crash(100.0, uptime_s=500.0), *(crash(200.0 + t) for t in range(4)), killed(260.0)]
    history: list[ExitRecord] = []
    for record in exits[:-1]:
        history.append(record)
        assert isinstance(policy.decide(history, now=record.at_s, name="echo-agent"), Restart)
    history.append(exits[-1])
    decision = policy.decide(history, now=260.0, name="echo-agent")
    assert decision == GiveUp(
        "echo-agent exited 6 times within 300 s (last: killed by SIGKILL); giving up",
        tuple(exits),
    )


def test_the_default_name_reads_as_a_sentence() -> None:
    decision = RestartPolicy(max_restarts=1, window_s=7.5).decide([crash(0), crash(1)], now=1)
    assert isinstance(decision, GiveUp)
    assert decision.reason == (
        "the agent exited 2 times within 7.5 s (last: exited with code 1); giving up"
    )


def test_max_restarts_zero_never_restarts() -> None:
    policy = RestartPolicy(max_restarts=0)
    record = crash(5.0, uptime_s=3600.0, reason="killed by SIGSEGV")
    decision = policy.decide([record], now=5.0, name="gemini")
    assert decision == GiveUp(
        "gemini stopped (killed by SIGSEGV) and restarts are disabled; giving up", (record,)
    )


def test_an_empty_history_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="at least"):
        RestartPolicy().decide([], now=0.0)


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {"initial_delay_s": -0.1},
        {"initial_delay_s": math.nan},
        {"initial_delay_s": math.inf},
        {"multiplier": 0.5},
        {"multiplier": math.inf},
        {"max_delay_s": 0.1},  # below the initial delay
        {"max_delay_s": math.inf},
        {"max_restarts": -1},
        {"max_restarts": 2.5},
        {"max_restarts": True},
        {"window_s": 0.0},
        {"window_s": -5.0},
        {"window_s": math.nan},
        {"reset_after_uptime_s": 0.0},
        {"reset_after_uptime_s": math.nan},
    ],
    ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()),
)
def test_invalid_settings_are_rejected(settings: dict[str, Any]) -> None:
    name = next(iter(settings))
    with pytest.raises(ValueError, match=name):
        RestartPolicy(**settings)


def test_exit_records_reject_impossible_times() -> None:
    with pytest.raises(ValueError, match="uptime_s"):
        crash(1.0, uptime_s=-1.0)
    with pytest.raises(ValueError, match="at_s"):
        crash(math.nan)


# -- the history for error messages ----------------------------------------------------------


def test_the_history_lists_each_exit_with_uptime_age_and_stderr() -> None:
    noisy = ExitRecord(9.0, 2.5, 1, None, "exited with code 1", "Traceback\nValueError: boom\n\n")
    text = format_exit_history([crash(4.0), killed(6.0), noisy], now=10.0)
    assert text.splitlines() == [
        "exit 1: exited with code 1 after 0.1 s (6 s ago)",
        "exit 2: killed by SIGKILL after 0.1 s (4 s ago)",
        "exit 3: exited with code 1 after 2.5 s (1 s ago); stderr: ValueError: boom",
    ]


def test_a_long_history_shows_the_newest_exits() -> None:
    text = format_exit_history([crash(float(t)) for t in range(25)], limit=3)
    assert text.splitlines() == [
        "(22 earlier exits not shown)",
        "exit 23: exited with code 1 after 0.1 s",
        "exit 24: exited with code 1 after 0.1 s",
        "exit 25: exited with code 1 after 0.1 s",
    ]
    assert format_exit_history([]) == ""


def test_the_policy_module_is_pure() -> None:
    source = Path(__file__).resolve().parents[2] / "acp_bridge" / "process" / "policy.py"
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported.isdisjoint({"anyio", "trio", "asyncio", "os", "signal", "time", "psutil"})


# -- properties ------------------------------------------------------------------------------

policies = st.builds(
    RestartPolicy,
    initial_delay_s=st.floats(0.0, 5.0),
    multiplier=st.floats(1.0, 4.0),
    max_delay_s=st.floats(5.0, 60.0),
    max_restarts=st.integers(0, 8),
    window_s=st.floats(0.5, 600.0),
    reset_after_uptime_s=st.floats(0.5, 120.0),
)


@st.composite
def exit_histories(draw: st.DrawFn) -> list[ExitRecord]:
    """Plausible histories: each exit comes at least its own uptime after the previous one."""
    at_s = draw(st.floats(-1e6, 1e6))
    history = []
    for _ in range(draw(st.integers(1, 30))):
        uptime_s = draw(st.one_of(st.floats(0.0, 2.0), st.floats(0.0, 200.0)))
        at_s += uptime_s + draw(st.floats(0.0, 100.0))
        history.append(crash(at_s, uptime_s=uptime_s))
    return history


def model_gives_up(policy: RestartPolicy, history: list[ExitRecord], now: float) -> bool:
    """The rule written out plainly: more than max_restarts exits in the window since a reset."""
    since_reset: list[float] = []
    for record in history:
        if record.uptime_s >= policy.reset_after_uptime_s:
            since_reset = []
        since_reset.append(record.at_s)
    return sum(1 for at_s in since_reset if at_s > now - policy.window_s) > policy.max_restarts


@given(policies, exit_histories(), st.floats(0.0, 1000.0))
def test_it_gives_up_exactly_when_the_window_since_the_last_reset_is_over_the_cap(
    policy: RestartPolicy, history: list[ExitRecord], later_s: float
) -> None:
    now = history[-1].at_s + later_s
    decision = policy.decide(history, now)
    assert isinstance(decision, GiveUp) == model_gives_up(policy, history, now)
    if isinstance(decision, GiveUp):
        assert decision.history == tuple(history)
        assert decision.reason.endswith("giving up")


@given(policies, exit_histories())
def test_delays_stay_within_bounds_and_grow_within_a_run_of_quick_exits(
    policy: RestartPolicy, history: list[ExitRecord]
) -> None:
    previous: Restart | None = None
    for end in range(1, len(history) + 1):
        record = history[end - 1]
        decision = policy.decide(history[:end], now=record.at_s)
        if not isinstance(decision, Restart):
            previous = None
            continue
        assert 0.0 <= decision.delay_s <= policy.max_delay_s
        if policy.is_reset_by(record):
            assert decision == Restart(policy.first_delay_s, 1)
        elif previous is not None:
            assert decision.attempt == previous.attempt + 1
            assert decision.delay_s >= previous.delay_s
        previous = decision


@given(policies, st.lists(st.floats(0.0, 30.0), min_size=1, max_size=40))
def test_a_supervisor_obeying_it_never_restarts_more_than_the_cap_in_any_window(
    policy: RestartPolicy, quick_uptimes: list[float]
) -> None:
    """Simulate the loop: exit, decide, wait the delay, run a while, exit again."""
    if max(quick_uptimes) >= policy.reset_after_uptime_s:
        quick_uptimes = [u % policy.reset_after_uptime_s * 0.99 for u in quick_uptimes]
    history: list[ExitRecord] = []
    decided_at: list[float] = []  # exits that were granted a restart
    restarted_at: list[float] = []  # when those restarts happened, after the delay
    now = 0.0
    for uptime_s in quick_uptimes:
        now += uptime_s
        history.append(crash(now, uptime_s=uptime_s))
        decision = policy.decide(history, now)
        if isinstance(decision, GiveUp):
            break
        decided_at.append(now)
        now += decision.delay_s
        restarted_at.append(now)
    for t in decided_at:
        assert sum(1 for s in decided_at if t - policy.window_s < s <= t) <= policy.max_restarts
    # Counted by when the restarts happen, too: delays never shrink within a run, so a later
    # restart is never pulled closer to an earlier one (the slack absorbs float rounding).
    for t in restarted_at:
        window = policy.window_s - 1e-6
        assert sum(1 for s in restarted_at if t - window < s <= t) <= policy.max_restarts


def quarantined(at_s: float) -> ExitRecord:
    return ExitRecord(at_s, QUICK_S, None, 9, "was quarantined: no answer to cancel", ordered=True)


def test_quarantines_restart_at_once_and_never_use_up_the_agent() -> None:
    """A user who cancels again and again an agent slow to honour cancel must not make the
    bridge give up on it (found in review: the 6th stop in 5 minutes ended the agent)."""
    policy = RestartPolicy(max_restarts=2)
    history = [quarantined(float(t)) for t in range(20)]
    decision = policy.decide(history, now=20.0)
    assert isinstance(decision, Restart)
    assert decision.delay_s == 0.0


def test_crashes_between_quarantines_still_count_and_back_off() -> None:
    policy = RestartPolicy(max_restarts=2, first_delay_s=0.0, initial_delay_s=0.25)
    history = [crash(1.0), quarantined(2.0), crash(3.0)]
    decision = policy.decide(history, now=3.0)
    assert isinstance(decision, Restart) and decision.delay_s == 0.25  # the second failure
    history += [quarantined(4.0), crash(5.0)]
    assert isinstance(policy.decide(history, now=5.0), GiveUp)  # three failures > 2
