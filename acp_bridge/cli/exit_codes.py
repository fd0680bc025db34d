"""The exit codes of ``acp-bridge``: the contract scripts rely on, defined once.

Imports nothing, so ``acp-bridge --help`` can use it within its startup budget.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "EXIT_AGENT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TURN_FAILED",
    "EXIT_USAGE",
    "HELP",
]

EXIT_OK: Final = 0
"""Every message ended ``done``."""
EXIT_USAGE: Final = 2
"""Usage error: a bad option or value, a conversation that can't be continued from here."""
EXIT_AGENT_FAILED: Final = 3
"""The agent could not be started, initialized or authenticated."""
EXIT_TURN_FAILED: Final = 4
"""At least one message did not end ``done``: failed, cancelled by a deadline, left queued
because the agent was given up, or refused as input (not UTF-8, too long); or the store could
not be written (a full disk, the store removed or replaced): one line names what was not
stored, and the run stops at once, the agent stopped."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted by SIGINT, SIGTERM or SIGHUP, or stdout closed or failing (a closed pipe, a full
disk, a terminal gone): the running turn is recorded ``cancelled``."""

HELP: Final = (
    f"Exit codes: {EXIT_OK} every message ended done; "
    f"{EXIT_TURN_FAILED} at least one message did not end done (failed, cancelled by a "
    "deadline, given up, or refused as input) or the store could not be written; "
    f"{EXIT_AGENT_FAILED} the agent could not be started, initialized or authenticated; "
    f"{EXIT_USAGE} usage error; {EXIT_INTERRUPTED} interrupted (SIGINT/SIGTERM/SIGHUP) or "
    "stdout closed or failing."
)
"""The exit codes as one paragraph, for ``--help`` epilogs."""
