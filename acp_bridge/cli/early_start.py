"""What ``run``'s entry point hands to ``run``: the agent it spawned before the library was
imported. (The signals that came before ``run``'s own signal watcher took over are kept by
:mod:`.early_signals`.)

Both sides need it: :mod:`acp_bridge.cli.run_entry` fills it in, and imports
:mod:`acp_bridge.cli.run` only afterwards (lazily: that import is what the early spawn overlaps);
:mod:`acp_bridge.cli.run` adopts the agent. Keeping it here lets ``run`` import it without
importing its own entry point. Like the entry point, this module imports only what the spawn
needs.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from acp_bridge.process.early import AdoptedProcess, discard
from acp_bridge.process.spec import AgentSpec

__all__ = ["EarlyAgent", "interrupted_line"]


@dataclass
class EarlyAgent:
    """An agent spawned before the conversation was opened, until someone adopts it."""

    spec: AgentSpec
    popen: subprocess.Popen[bytes] | None

    def adopt(self, spec: AgentSpec) -> AdoptedProcess | None:
        """The process, if it was spawned from ``spec``; the caller owns it from now on."""
        if self.popen is None or spec != self.spec:
            return None
        popen, self.popen = self.popen, None
        return AdoptedProcess(popen)

    def discard(self) -> None:
        if self.popen is not None:
            popen, self.popen = self.popen, None
            discard(popen)


def interrupted_line(agent_spawned: bool) -> str:
    """What ``run`` says when a signal stops it before its own watcher took over."""
    if agent_spawned:
        return "acp-bridge: interrupted; the agent was still starting; it was stopped"
    return "acp-bridge: interrupted before the agent was started"
