"""When to restart a crashed agent, and when to give up. Pure: no I/O, no clock, no signals.

The supervisor records every exit as an :class:`ExitRecord` and asks
:meth:`RestartPolicy.decide` what to do next, passing the current monotonic time as ``now``;
it then acts on the answer (sleep ``delay_s`` and respawn, or raise ``RestartLimitError``).
Deciding is synchronous and deterministic, so the whole policy is tested without processes or
sleeps.

Theory of operation
-------------------
*Runs.* An exit after at least ``reset_after_uptime_s`` of uptime ends a healthy stretch: it
*resets* the policy. The exits from the most recent such exit (inclusive) to the newest one
form the current *run*; everything before it is forgotten (it stays in the history that error
messages show). A long-lived agent that finally crashes therefore starts over at the initial
delay, as attempt 1.

*Backoff.* The first exit of a run (``attempt`` 1) is restarted after ``first_delay_s``, which
is zero by default: an agent that crashed once after working is brought back at once (the
recovery budget in design.md is the agent's own start-up time plus 150 ms). The n-th exit
(n >= 2) waits ``initial_delay_s * multiplier ** (n - 2)``, capped at ``max_delay_s``, so a
crash loop backs off 0, 0.25, 0.5, 1, ... seconds.

*Cap.* Only exits of the current run that happened within the last ``window_s`` seconds count
towards the cap, judged by when they exited (``at_s > now - window_s``). When more than
``max_restarts`` of them fall in the window the policy gives up: each of those exits except
the first was followed by a restart, so granting one more would exceed ``max_restarts``
restarts within ``window_s``. ``max_restarts=0`` gives up on the first exit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from acp_bridge.record import record

__all__ = [
    "Decision",
    "ExitRecord",
    "GiveUp",
    "Restart",
    "RestartPolicy",
    "format_exit_history",
]

_HISTORY_LINES = 10
"""How many exits :func:`format_exit_history` lists before summarising the older ones."""
_STDERR_NOTE_CHARS = 200
"""How much of an exit's last stderr line an exit history quotes."""


@record
class ExitRecord:
    """One exit of an agent process.

    Attributes:
        at_s: when the exit was observed, on the supervisor's monotonic clock.
        uptime_s: how long that process had been running when it exited.
        returncode: the exit code, or None when the process was killed by a signal (or the
            code is unknown).
        signal: the number of the signal that killed it, if one did.
        reason: a short human description, e.g. ``"exited with code 1"``,
            ``"killed by SIGKILL"``, ``"watchdog: tree RSS 612 MiB over the 500 MiB limit"``.
        stderr_tail: the last lines the process wrote to stderr, for error messages.
        ordered: the bridge ended the process on purpose (a quarantine: a cancel it did not
            answer within the grace window). It is restarted at once and does not count
            against the restart limit, so a user's repeated cancels never use up an agent that
            is healthy but slow to stop.
    """

    at_s: float
    uptime_s: float
    returncode: int | None
    signal: int | None
    reason: str
    stderr_tail: str = ""
    ordered: bool = False

    @classmethod
    def of_process(
        cls,
        at_s: float,
        uptime_s: float,
        status: int | None,
        reason: str,
        stderr_tail: str = "",
        *,
        ordered: bool = False,
    ) -> ExitRecord:
        """The record of a process whose wait status Python reported as ``status`` (negative:
        killed by that signal; None: it did not exit, or nobody saw it). The one place a
        returncode becomes ``returncode`` and ``signal``: never both, and a signal's number is
        never passed off as an exit code."""
        killed = status is not None and status < 0
        return cls(
            at_s,
            uptime_s,
            None if status is None or killed else status,
            -status if status is not None and killed else None,
            reason,
            stderr_tail,
            ordered,
        )

    def __post_init__(self) -> None:
        if not math.isfinite(self.at_s):
            raise ValueError(f"at_s must be finite, not {self.at_s!r}")
        if not (math.isfinite(self.uptime_s) and self.uptime_s >= 0):
            raise ValueError(f"uptime_s must be finite and >= 0, not {self.uptime_s!r}")


@record
class Restart:
    """Restart after ``delay_s`` seconds; ``attempt`` counts from 1 since the last reset."""

    delay_s: float
    attempt: int


@record
class GiveUp:
    """Stop restarting. ``reason`` is a sentence for the user; ``history`` is every exit seen."""

    reason: str
    history: tuple[ExitRecord, ...]


Decision = Restart | GiveUp


@record
class RestartPolicy:
    """Exponential backoff with a reset after sustained uptime and a cap per sliding window.

    See the module docstring for the exact rules. ``window_s`` and ``reset_after_uptime_s``
    may be ``math.inf`` (count every exit ever / never reset).

    Raises:
        ValueError: a setting is out of range (negative, NaN, a multiplier below 1, a cap
            below the initial delay, ...).
    """

    initial_delay_s: float = 0.25
    multiplier: float = 2.0
    first_delay_s: float = 0.0
    max_delay_s: float = 30.0
    max_restarts: int = 5
    window_s: float = 300.0
    reset_after_uptime_s: float = 60.0

    def __post_init__(self) -> None:
        _check(
            math.isfinite(self.initial_delay_s) and self.initial_delay_s >= 0,
            "initial_delay_s must be finite and >= 0",
            self.initial_delay_s,
        )
        _check(
            math.isfinite(self.first_delay_s) and 0 <= self.first_delay_s <= self.max_delay_s,
            "first_delay_s must be finite, >= 0 and <= max_delay_s",
            self.first_delay_s,
        )
        _check(
            math.isfinite(self.multiplier) and self.multiplier >= 1,
            "multiplier must be finite and >= 1",
            self.multiplier,
        )
        _check(
            math.isfinite(self.max_delay_s) and self.max_delay_s >= self.initial_delay_s,
            "max_delay_s must be finite and >= initial_delay_s",
            self.max_delay_s,
        )
        _check(
            isinstance(self.max_restarts, int)
            and not isinstance(self.max_restarts, bool)
            and self.max_restarts >= 0,
            "max_restarts must be an int >= 0",
            self.max_restarts,
        )
        # NaN fails every comparison, so "> 0" also rejects it; infinity is allowed.
        _check(self.window_s > 0, "window_s must be > 0", self.window_s)
        _check(
            self.reset_after_uptime_s > 0,
            "reset_after_uptime_s must be > 0",
            self.reset_after_uptime_s,
        )

    def decide(
        self, history: Sequence[ExitRecord], now: float, *, name: str = "the agent"
    ) -> Decision:
        """What to do about the newest exit, ``history[-1]``.

        Args:
            history: every exit of this agent so far, oldest first; the last one is the exit
                just observed.
            now: the current time on the same monotonic clock as ``ExitRecord.at_s``.
            name: how to call the agent in a give-up reason (e.g. ``"echo-agent"``).

        Returns:
            :class:`Restart` with the delay and attempt number, or :class:`GiveUp` with a reason
            and the whole history.

        Raises:
            ValueError: ``history`` is empty.
        """
        if not history:
            raise ValueError("decide() needs at least the exit just observed")
        run = history[self._run_start(history) :]
        if history[-1].ordered:
            return Restart(delay_s=0.0, attempt=len(run))
        failures = [record for record in run if not record.ordered]
        in_window = [record for record in failures if record.at_s > now - self.window_s]
        if len(in_window) > self.max_restarts:
            return GiveUp(self._give_up_reason(name, len(in_window), history[-1]), tuple(history))
        return Restart(delay_s=self.delay_for(len(failures)), attempt=len(run))

    def delay_for(self, attempt: int) -> float:
        """The backoff before restart number ``attempt`` (1-based) of a run of quick exits."""
        if attempt < 1:
            raise ValueError(f"attempt counts from 1, not {attempt!r}")
        if attempt == 1:
            return self.first_delay_s
        if self.initial_delay_s == 0:
            return 0.0
        try:
            delay = self.initial_delay_s * self.multiplier ** (attempt - 2)
        except OverflowError:  # a huge attempt number: far past the cap anyway
            return self.max_delay_s
        return min(delay, self.max_delay_s)

    def is_reset_by(self, record: ExitRecord) -> bool:
        """True when ``record``'s process ran long enough to reset backoff and count."""
        return record.uptime_s >= self.reset_after_uptime_s

    def _run_start(self, history: Sequence[ExitRecord]) -> int:
        """Index of the first exit of the current run (the newest resetting exit, else 0)."""
        for index in range(len(history) - 1, -1, -1):
            if self.is_reset_by(history[index]):
                return index
        return 0

    def _give_up_reason(self, name: str, exits: int, last: ExitRecord) -> str:
        if self.max_restarts == 0:
            return f"{name} stopped ({last.reason}) and restarts are disabled; giving up"
        within = "" if math.isinf(self.window_s) else f" within {self.window_s:g} s"
        return f"{name} exited {exits} times{within} (last: {last.reason}); giving up"


def format_exit_history(
    history: Sequence[ExitRecord], *, now: float | None = None, limit: int = _HISTORY_LINES
) -> str:
    """The exits as lines for an error message, oldest first, the newest ``limit`` in full.

    With ``now`` each line also says how long ago the exit was. A line quotes the last
    non-blank stderr line of its exit, when there is one.

    >>> format_exit_history([ExitRecord(10.0, 0.5, 1, None, "exited with code 1")], now=12.0)
    'exit 1: exited with code 1 after 0.5 s (2 s ago)'
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, not {limit!r}")
    lines = []
    skipped = max(0, len(history) - limit)
    if skipped:
        lines.append(f"({skipped} earlier exit{'s' if skipped != 1 else ''} not shown)")
    for number, exit_record in enumerate(history[skipped:], start=skipped + 1):
        line = f"exit {number}: {exit_record.reason} after {exit_record.uptime_s:.3g} s"
        if now is not None:
            line += f" ({max(0.0, now - exit_record.at_s):.3g} s ago)"
        if note := _last_line(exit_record.stderr_tail):
            line += f"; stderr: {note}"
        lines.append(line)
    return "\n".join(lines)


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            line = line.strip()
            if len(line) > _STDERR_NOTE_CHARS:
                return line[: _STDERR_NOTE_CHARS - 3] + "..."
            return line
    return ""


def _check(ok: bool, message: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{message}, not {value!r}")
