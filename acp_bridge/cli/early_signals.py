"""The signals that come before ``run``'s own signal watcher is installed (issue 21, item 8).

``run`` stops on SIGINT, SIGTERM and SIGHUP with exit 130 in every phase, the first
milliseconds included: the program's launcher (:mod:`.launch`) calls :func:`hold_if_run` before
it imports the command line, so from then on such a signal is recorded, not fatal (by default
SIGTERM and SIGHUP kill the process, and a KeyboardInterrupt raised inside an import ends in a
traceback). ``run``'s entry point then calls :func:`catch_early_signals`, acts on a signal held
so far at its next safe point, and from there on a signal interrupts like Ctrl-C, except while
:func:`signals_held` is entered; ``run``'s watcher treats one not yet acted upon as its first.

A signal inherited as ignored (SIGINT in a background job, SIGHUP under ``nohup``) stays
ignored: it is neither caught here nor watched later (:func:`watched_signals`).

The standard library only: this runs before anything else is imported.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Sequence
from typing import Final

__all__ = [
    "catch_early_signals",
    "hold_if_run",
    "ignore_stopping_signals",
    "interrupted_early",
    "signals_held",
    "watched_signals",
]

_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_ignored: set[signal.Signals] | None = None
"""The signals this process inherited as ignored (decided at the first install)."""

_interrupted: list[int] = []
"""The signals that came while :func:`_interrupt` was installed (the first only)."""

_raising: list[bool] = []
"""Non-empty once :func:`catch_early_signals` ran: a signal then raises KeyboardInterrupt."""

_spawning: list[bool] = []
"""Non-empty while :func:`signals_held` is entered: a signal is then recorded, not raised."""


def hold_if_run(argv: Sequence[str]) -> None:
    """If ``argv`` (the arguments after the program's name) runs ``acp-bridge run``, record its
    stopping signals from now on instead of dying of them. Nothing for other commands."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command == "run":
        _install()


def catch_early_signals() -> None:
    """Until ``run``'s own signal watcher is installed, SIGTERM and SIGHUP interrupt like Ctrl-C
    (once: a repeat must not interrupt the cleanup), so an agent already spawned is stopped on
    the way out instead of orphaned. A signal recorded since :func:`hold_if_run` is kept (see
    :func:`interrupted_early`); the ones of an earlier run in this process are forgotten."""
    if not _installed():
        _install()
    _raising.append(True)


def ignore_stopping_signals() -> None:
    """The run is over: a late signal must not kill the bridge mid-cleanup (that ended it by
    the signal, not with exit 130)."""
    for signum in _SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def watched_signals() -> tuple[signal.Signals, ...]:
    """The stopping signals ``run`` watches: those not inherited as ignored."""
    ignored = _ignored or set()
    return tuple(signum for signum in _SIGNALS if signum not in ignored)


def interrupted_early() -> bool:
    """Whether a signal came before ``run``'s own signal watcher took over. Its
    KeyboardInterrupt may not have been raised (held, or raised inside a callback whose
    exceptions CPython only prints), so the entry point checks it at its safe points and the
    watcher treats it as the first signal."""
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


def _install() -> None:
    global _ignored
    if _ignored is None:
        _ignored = {s for s in _SIGNALS if signal.getsignal(s) is signal.SIG_IGN}
    _interrupted.clear()
    _raising.clear()
    for signum in watched_signals():
        signal.signal(signum, _interrupt)


def _installed() -> bool:
    return all(signal.getsignal(signum) is _interrupt for signum in watched_signals())


def _interrupt(signum: int, frame: object) -> None:
    if _interrupted:
        return  # already on the way out: the cleanup (stopping the agent) must finish
    _interrupted.append(signum)
    if _raising and not _spawning:
        raise KeyboardInterrupt
