"""How an agent is started, whichever call starts it: ``subprocess.Popen`` early in a one-shot
(:mod:`.early`) or ``anyio.open_process`` (:mod:`.spawn`). Both give the same pipes and session
and report a failure in the same words. Standard library only."""

from __future__ import annotations

import subprocess
from typing import Any, Final

from acp_bridge.errors import SpawnError
from acp_bridge.process.spec import AgentSpec

__all__ = ["PIPED_SESSION", "start_failure"]

PIPED_SESSION: Final[dict[str, Any]] = {
    "stdin": subprocess.PIPE,
    "stdout": subprocess.PIPE,
    "stderr": subprocess.PIPE,
    "start_new_session": True,  # its own process group: the whole tree is signalled together
}
"""The keyword arguments both starts share (``cwd`` and ``env`` come from the spec)."""


def start_failure(spec: AgentSpec, exc: OSError) -> SpawnError:
    """The error for a command that could not be started (raise it ``from exc``)."""
    reason = exc.strerror or str(exc)
    return SpawnError(f"could not start {spec.name} ({spec.display_command}): {reason}")
