"""Starting a terminal's command from a (text-checked) ``terminal/create`` request.

How a command runs:

* In its own process group (``start_new_session=True``), holding everything it spawns. stdin
  is ``/dev/null``; stdout and stderr share one pipe, so their interleaving is kept.
* ``command`` with ``args`` is executed directly; without ``args`` it runs through ``/bin/sh
  -c``, since agents send whole command lines that way (Zed runs them through a shell too).
* In the session's cwd, or in ``cwd``, which must be an absolute existing directory. It is
  *not* confined to the session's tree: the command could ``cd`` anywhere anyway, so the
  permission policy (tool kind ``execute``) is the real gate.
* With ``base_env`` plus the request's ``env``. ``base_env=None`` inherits ours; the library
  never reads ``os.environ``, so ``env`` is then refused (the CLI passes ``os.environ``).

Errors are :class:`RpcError`: an unknown session -32002; a bad ``cwd``, ``env`` without a
``base_env``, or a command that cannot start -32602 with a ``reason``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import Process

from acp_bridge.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from acp_bridge.wire.client_methods import CreateTerminalRequest

__all__ = ["command_argv", "environment", "spawn", "working_directory"]


def _error(code: int, message: str, **data: Any) -> RpcError:
    return RpcError(code, message, data or None)


async def working_directory(request: CreateTerminalRequest, session_cwd: Path | None) -> Path:
    """Where to run ``request``: ``session_cwd`` (None: an unknown session), or its ``cwd``."""
    if session_cwd is None:
        data = {"sessionId": request.session_id, "reason": "unknown_session"}
        raise _error(ErrorCode.RESOURCE_NOT_FOUND, "Unknown session", **data)
    if request.cwd is None:
        return session_cwd
    cwd = request.cwd
    # Abandoned on cancel: a stat on a hung mount must not hold up the request's cancel.
    is_dir = os.path.isabs(cwd) and await anyio.to_thread.run_sync(
        os.path.isdir, cwd, abandon_on_cancel=True
    )
    if not is_dir:
        message = "cwd must be an absolute path to an existing directory"
        raise _error(ErrorCode.INVALID_PARAMS, message, cwd=cwd, reason="bad_cwd")
    return Path(cwd)


def command_argv(request: CreateTerminalRequest) -> list[str]:
    """``command`` and ``args`` as given, or ``command`` as a shell command line."""
    if request.args:
        return [request.command, *request.args]
    return ["/bin/sh", "-c", request.command]


def environment(
    request: CreateTerminalRequest, base_env: dict[str, str] | None
) -> dict[str, str] | None:
    """``base_env`` (None: inherit ours) with the request's ``env`` on top."""
    if not request.env:
        return base_env
    if base_env is None:
        message = "This client does not support env for terminal commands"
        raise _error(ErrorCode.INVALID_PARAMS, message, reason="env_not_supported")
    return {**base_env, **{var.name: var.value for var in request.env}}


async def spawn(argv: list[str], cwd: Path, env: dict[str, str] | None, command: str) -> Process:
    """Start ``argv`` in its own process group, output on one pipe; -32602 if it cannot."""
    try:
        return await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        error = exc.strerror or type(exc).__name__
        message = f"Could not start {command!r}: {error}"
        data = {"command": command, "reason": "spawn_failed", "error": error}
        raise _error(ErrorCode.INVALID_PARAMS, message, **data) from exc
