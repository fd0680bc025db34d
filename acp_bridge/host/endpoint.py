"""Where the host listens, and the guards on it (issue 22).

The socket lives in a private directory: ``$XDG_RUNTIME_DIR/acp-bridge/`` when the session has
a runtime directory, else beside the store (``<store dir>/<store name>.host/``). The directory
is created 0700 and used only if it is ours, not a symbolic link and writable by nobody else;
its parent must be one no other user can swap entries in. The socket file is created 0600 (a
tight umask during ``bind``, then ``chmod``). A socket file already there is removed only after
a connection to it was refused: a live host's socket is never taken over.

Every refusal is a :class:`HostEndpointError`, one line naming the path and the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from acp_bridge.errors import BridgeError, UnsafeFileError
from acp_bridge.safe_files import check_directory, open_private_directory

__all__ = [
    "HOST_SOCKET_NAME",
    "MAX_SOCKET_PATH_BYTES",
    "HostEndpointError",
    "HostRunningError",
    "bind_socket",
    "conversation_socket_path",
    "default_socket_path",
    "prepare_socket_dir",
]

HOST_SOCKET_NAME: Final = "host.sock"
SOCKET_MODE: Final = 0o600
_RUNTIME_SUBDIR: Final = "acp-bridge"
MAX_SOCKET_PATH_BYTES: Final = 107
"""The longest path a Unix socket address holds on Linux (108 bytes with the NUL)."""


class HostEndpointError(BridgeError):
    """The socket directory or the socket path cannot be used: one line, path and reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class HostRunningError(HostEndpointError):
    """Another process already answers on the socket."""


def default_socket_path(store_path: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The host's socket for ``store_path``: under ``$XDG_RUNTIME_DIR`` when set, else beside
    the store. ``environ`` defaults to :data:`os.environ` (the caller may pass cli's copy)."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / _RUNTIME_SUBDIR / HOST_SOCKET_NAME
    return store_path.parent / f"{store_path.name}.host" / HOST_SOCKET_NAME


def conversation_socket_path(socket_dir: Path, conversation_id: str) -> Path:
    """The socket a ``run`` or ``chat`` owner serves its one conversation on."""
    if not conversation_id or "/" in conversation_id or conversation_id in {".", ".."}:
        raise ValueError(f"not a conversation id: {conversation_id!r}")
    return socket_dir / f"c-{conversation_id}.sock"


def prepare_socket_dir(directory: Path) -> None:
    """Create ``directory`` 0700 if missing (its parent too, if missing), then check it.

    Raises:
        HostEndpointError: the directory (or its parent) is a symbolic link, not a directory,
            not ours, or writable by group or others; or it could not be created.
    """
    path = str(directory)
    parent = directory.parent
    if directory.is_symlink():
        raise HostEndpointError(
            path, "it is a symbolic link; acp-bridge will not use it (the host's socket directory)"
        )
    try:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_directory(str(parent))
        fd = open_private_directory(path, create=True)
    except UnsafeFileError as exc:
        raise HostEndpointError(exc.path, f"{exc.reason} (the host's socket directory)") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise HostEndpointError(path, f"cannot create the socket directory: {reason}") from None
    os.close(fd)


def bind_socket(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` (0600), in a directory :func:`prepare_socket_dir`
    checked. A stale socket file (nothing accepts on it) is removed first.

    Raises:
        HostRunningError: a process accepts connections on ``path``.
        HostEndpointError: ``path`` is too long, or something other than a socket is there,
            or binding failed.
    """
    text = str(path)
    if len(os.fsencode(text)) > MAX_SOCKET_PATH_BYTES:
        raise HostEndpointError(
            text, f"the path is longer than a Unix socket allows ({MAX_SOCKET_PATH_BYTES} bytes)"
        )
    _remove_stale(text)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(0o177)
        try:
            sock.bind(text)
        finally:
            os.umask(old_umask)
        os.chmod(text, SOCKET_MODE)
        sock.listen(min(socket.SOMAXCONN, 4096))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise HostRunningError(text, "another process bound the socket just now") from None
        reason = exc.strerror or type(exc).__name__
        raise HostEndpointError(text, f"cannot listen: {reason}") from None
    return sock


def _remove_stale(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise HostEndpointError(path, "something other than a socket is there; not replaced")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # nobody accepts on it: a host that died left it
        return
    finally:
        probe.close()
    raise HostRunningError(path, "a host is already listening on this socket")
