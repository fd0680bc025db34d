"""What ``run``'s entry point hands to ``run``: the agent it spawned before the library was
imported, and the signals that came before ``run``'s own signal watcher took over.

Both sides need these: :mod:`acp_bridge.cli.run_entry` fills them in, and imports
:mod:`acp_bridge.cli.run` only afterwards (lazily: that import is what the early spawn overlaps);
:mod:`acp_bridge.cli.run` adopts the agent and acts on an early signal. Keeping them here lets
``run`` import them without importing its own entry point. Like the entry point, this module
imports only what the spawn needs.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from acp_bridge.process.early import AdoptedProcess, discard
from acp_bridge.process.spec import AgentSpec

__all__ = ["EarlyAgent", "catch_early_signals", "interrupted_early", "signals_held"]

_EARLY_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


_interrupted: list[int] = []
"""The signals that came while :func:`_interrupt` was installed (the first only)."""

_spawning: list[bool] = []
"""Non-empty while :func:`signals_held` is entered: a signal is then recorded, not raised."""


def catch_early_signals() -> None:
    """Until ``run``'s own signal watcher is installed, SIGTERM and SIGHUP interrupt like Ctrl-C
    (once: a repeat must not interrupt the cleanup), so an agent already spawned is stopped on
    the way out instead of orphaned. Forgets the signals of an earlier call."""
    _interrupted.clear()
    for signum in _EARLY_SIGNALS:
        signal.signal(signum, _interrupt)


def interrupted_early() -> bool:
    """Whether a signal came before ``run``'s own signal watcher took over. Its
    KeyboardInterrupt may not have been delivered (a callback's exceptions are only printed by
    CPython), so the entry point checks it after the import and the watcher treats it as the
    first signal."""
    return bool(_interrupted)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Within: a signal is recorded (see :func:`interrupted_early`), not raised.

    For the spawn: a KeyboardInterrupt raised after the fork but before ``Popen`` returns (while
    it waits for the exec, say) would leave a running agent that nobody holds, so nobody stops
    it; the soak caught one. Blocking the signals instead is no answer: the agent would inherit
    the mask.
    """
    _spawning.append(True)
    try:
        yield
    finally:
        _spawning.clear()


def _interrupt(signum: int, frame: object) -> None:
    if _interrupted:
        return  # already on the way out: the cleanup (stopping the agent) must finish
    _interrupted.append(signum)
    if not _spawning:
        raise KeyboardInterrupt
