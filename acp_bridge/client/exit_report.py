"""The words a caller reads when an agent dies: pure formatting of exit records."""

from __future__ import annotations

from collections.abc import Sequence

from acp_bridge.errors import AgentExitedError
from acp_bridge.process.policy import ExitRecord, format_exit_history

__all__ = ["history_lines", "startup_failure", "turn_failure"]

_STDERR_LINES_SHOWN = 10


def _stderr_tail(record: ExitRecord, heading: str) -> str:
    lines = "\n".join(record.stderr_tail.splitlines()[-_STDERR_LINES_SHOWN:])
    return f"\n{heading}:\n{lines}" if lines else ""


def startup_failure(name: str, record: ExitRecord) -> str:
    """Why the very first start failed, and what to check."""
    return (
        f"{name} could not be started: it {record.reason}. Check the agent command, its "
        f"installation and its credentials." + _stderr_tail(record, "Last stderr lines")
    )


def turn_failure(
    name: str, record: ExitRecord, will_restart: bool, pid: int, *, closing: bool = False
) -> AgentExitedError:
    """The error of a turn (or call) cut short by the agent's exit. ``closing``: the agent was
    being closed anyway (nothing more to do), so it is not restarted, and a later run may retry
    the message (recoverable); not restarted otherwise means the restart limit was reached."""
    not_resent = "the interrupted prompt is not re-sent"
    if will_restart:
        next_step = f"restarting it and restoring the session; {not_resent}"
    elif closing:
        next_step = f"not restarting it: the bridge is stopping; {not_resent}"
    else:
        next_step = "not restarting it (restart limit reached)"
    return AgentExitedError(
        f"agent {name!r} (pid {pid}): {record.reason}; {next_step}"
        + _stderr_tail(record, "Last stderr lines of the agent"),
        returncode=record.returncode,
        signal=record.signal,
        stderr_tail=record.stderr_tail,
        recoverable=will_restart or closing,
    )


def history_lines(history: Sequence[ExitRecord]) -> tuple[str, ...]:
    return tuple(format_exit_history(history).splitlines())
