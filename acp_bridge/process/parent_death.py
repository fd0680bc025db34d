"""An agent dies with the bridge, even when the bridge is killed outright.

A bridge that exits in any ordinary way stops the agent's whole tree itself. A bridge killed
with SIGKILL (or the OOM killer) cannot: the agent, in its own session so that a terminal's
Ctrl-C reaches only the bridge, would live on, and a stubborn one that never reads its stdin
would never notice. On Linux the kernel can send a signal when a process's parent dies
(``PR_SET_PDEATHSIG``). Python's subprocess can only set it through ``preexec_fn``, which is
unsafe once threads exist, so the command is started through ``setpriv --pdeathsig KILL``
(util-linux), which sets it and then execs the agent: same pid, same argv once it runs, no
extra process.

Only the agent itself gets the signal; its own children see their pipes close. Where setpriv is
missing (not Linux, a minimal container), the command runs as given.

The kernel's "parent" is the *thread* that forked: when that thread ends, the signal fires. So
it is used only when the fork happens in the main thread, which lives as long as the process:
``subprocess.Popen`` called there, and asyncio, which forks in its loop's thread. trio forks in
a worker thread that retires when idle (that killed healthy agents every few seconds), so under
trio only the first agent of ``acp-bridge run`` (spawned early, with Popen) has the guarantee.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["dying_with_parent"]


@functools.cache
def _setpriv() -> str | None:
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("setpriv")


def dying_with_parent(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str] | None,
    forked_by_this_thread: bool = True,
) -> list[str]:
    """``argv`` started so that it is SIGKILLed when this process dies, where the platform
    allows; a command that cannot be found is left alone, so starting it fails as usual
    (with its own "No such file or directory"). ``forked_by_this_thread`` says whether the
    fork happens in the calling thread (False: e.g. trio's worker threads)."""
    setpriv = _setpriv()
    in_main_thread = threading.current_thread() is threading.main_thread()
    if setpriv is None or not argv or not (forked_by_this_thread and in_main_thread):
        return list(argv)
    program = argv[0]
    if os.sep in program:
        path = Path(program) if cwd is None else Path(cwd) / program
        if not os.access(path, os.X_OK) or path.is_dir():
            return list(argv)
    else:
        search = (env if env is not None else os.environ).get("PATH", os.defpath)
        if shutil.which(program, path=search) is None:
            return list(argv)
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]
