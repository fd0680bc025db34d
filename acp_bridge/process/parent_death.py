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
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["dying_with_parent"]


@functools.cache
def _setpriv() -> str | None:
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("setpriv")


def dying_with_parent(
    argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str] | None
) -> list[str]:
    """``argv`` started so that it is SIGKILLed when this process dies, where the platform
    allows; a command that cannot be found is left alone, so starting it fails as usual
    (with its own "No such file or directory")."""
    setpriv = _setpriv()
    if setpriv is None or not argv:
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
