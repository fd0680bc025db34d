"""The bearer token of a host reached over WebSocket (issue 22): a secret kept in a file.

``serve --listen`` takes ``--token-file F``: the token is read from F, or made when F is missing
(``secrets.token_urlsafe(32)``: 256 random bits) and written there for the user to copy to the
machines that attach. ``attach --host URL --token-file F`` only reads F.

The file is a private file (:mod:`acp_bridge.safe_files`): a regular file, never followed
through a symbolic link, owned by you, writable by nobody else, with one name (no other hard
link), in a directory no other user can swap entries in; made 0600 whatever the umask. A token
is a secret besides, so a file group or others can *read* is refused too (with the ``chmod``
that fixes it): a token others could read is no secret, and a server must not go on using it.

What a token may be: one line of printable ASCII without spaces (it travels in an HTTP header),
at most :data:`MAX_TOKEN_BYTES` long; a trailing newline is not part of it.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Final

from acp_bridge.errors import UnsafeFileError
from acp_bridge.safe_files import check_directory, create_private_file, open_private_file

__all__ = ["MAX_TOKEN_BYTES", "TOKEN_RANDOM_BYTES", "load_or_create_token", "load_token"]

TOKEN_RANDOM_BYTES: Final = 32
"""Random bytes in a new token (43 URL-safe characters)."""
MAX_TOKEN_BYTES: Final = 4096
"""The longest token read: a file longer than this is not a token file."""

_OTHERS_READ: Final = stat.S_IRGRP | stat.S_IROTH


def load_or_create_token(path: Path) -> str:
    """The token in ``path``; when nothing is there, a new random token written to a new
    0600 file first.

    Raises:
        UnsafeFileError: ``path`` is not a private file of yours, others can read it, its
            directory is one others can swap entries in, or it holds no valid token.
        OSError: it could not be created or read (a missing directory, EACCES).
    """
    check_directory(str(path.parent))
    if create_private_file(str(path)):
        token = secrets.token_urlsafe(TOKEN_RANDOM_BYTES)
        fd = _open(path, os.O_WRONLY)
        with os.fdopen(fd, "wb") as file:
            file.write(token.encode("ascii") + b"\n")
            file.flush()
            os.fsync(file.fileno())
        return token
    return load_token(path)


def load_token(path: Path) -> str:
    """The token in the existing file ``path`` (never created here).

    Raises:
        UnsafeFileError: as :func:`load_or_create_token`.
        OSError: it could not be read (missing, EACCES).
    """
    check_directory(str(path.parent))
    with os.fdopen(_open(path, os.O_RDONLY), "rb") as file:
        data = file.read(MAX_TOKEN_BYTES + 2)  # the token, its newline, and one byte more
    return _parse(data, path)


def _open(path: Path, flags: int) -> int:
    """``path`` opened as a private file (see the module's text), also refused when group or
    others can read it."""
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_private_file(
            path.name, dir_fd=dir_fd, shown_as=str(path), flags=flags, create=False
        )
    finally:
        os.close(dir_fd)
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if mode & _OTHERS_READ:
        os.close(fd)
        raise UnsafeFileError(
            str(path),
            f"group or others can read this token (mode {mode:04o}); "
            f"make it private with: chmod 600 {path}",
        )
    return fd


def _parse(data: bytes, path: Path) -> str:
    if data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise UnsafeFileError(str(path), "the token file is empty; delete it to have one made")
    if len(data) > MAX_TOKEN_BYTES:
        raise UnsafeFileError(
            str(path), f"it is longer than a token ({MAX_TOKEN_BYTES} bytes at most)"
        )
    if not all(0x21 <= byte <= 0x7E for byte in data):
        raise UnsafeFileError(
            str(path), "a token is one line of printable ASCII without spaces; this file is not"
        )
    return data.decode("ascii")
