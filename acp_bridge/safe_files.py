"""Opening paths another user could have planted, and paths that must not block (issue 21).

Two rules, one for each kind of path.

**Private files** hold prompts or decide who owns a conversation: the queue store, its
``.locks`` directory and lock files. acp-bridge uses one only if it is

- what it should be, a regular file (a directory for a directory), and not a symbolic link:
  opened with ``O_NOFOLLOW``, so a link planted in its place is refused, never followed;
- yours: owned by the effective user id;
- writable by nobody else: no group or other write bit (moot on a read-only file system).

The check is :func:`os.fstat` on the descriptor just opened, so what was checked is what is
used. New private files are created ``0600`` and directories ``0700`` whatever the umask (the
umask can only take bits away; an ``fchmod`` restores them), and an existing one keeps the mode
its owner chose. A file refused is not truncated, chmodded or written.

A directory that holds private files opened *by name* again later (SQLite opens the store by its
path) must also be one no other user can swap entries in: :func:`check_directory`.

**Plain files** acp-bridge reads or appends to (a config file, a registry, a mock script, a log)
may be symbolic links (dotfiles often are), but must be regular files: a FIFO would block the
open until some writer came, and a device could be anything. :func:`open_regular` looks first
(``stat``: nothing is opened that is not a regular file), then opens with ``O_NONBLOCK`` (a FIFO
swapped in meanwhile cannot block it) and checks the descriptor with ``fstat``.

Every refusal is an :class:`~acp_bridge.errors.UnsafeFileError` naming the path and the reason,
one line. Standard library only, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Final

from acp_bridge.errors import UnsafeFileError

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "check_directory",
    "check_private",
    "create_private_file",
    "open_private_directory",
    "open_private_file",
    "open_regular",
    "read_regular",
]

PRIVATE_FILE_MODE: Final = 0o600
PRIVATE_DIR_MODE: Final = 0o700

_OTHERS_WRITE: Final = stat.S_IWGRP | stat.S_IWOTH
_ROOT: Final = 0


def check_private(
    st: os.stat_result, path: str, *, directory: bool = False, fd: int | None = None
) -> None:
    """Refuse ``st`` (what ``path`` is; ``fd``, its descriptor, if open) unless it is a private
    file (or directory) of yours.

    Raises:
        UnsafeFileError: a symbolic link, another kind of file, another owner, or writable by
            group or others.
    """
    problem = _kind_problem(st.st_mode, directory=directory)
    if problem is None and st.st_uid != os.geteuid():
        problem = f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    others_write = st.st_mode & _OTHERS_WRITE
    if problem is None and others_write and not _read_only_fs(path if fd is None else fd):
        problem = f"another user can write it (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem is not None:
        raise UnsafeFileError(path, f"{problem}; acp-bridge will not use it")


def check_directory(path: str) -> None:
    """Refuse a directory in which another user could replace or rename your entries: one owned
    by someone other than you or root, or writable by group or others without the sticky bit
    (``/tmp``, mode 1777, is fine: there only an entry's owner may remove or rename it).

    Raises:
        UnsafeFileError: not such a directory.
        OSError: it cannot be looked at (missing, EACCES).
    """
    st = os.stat(path)  # a symbolic link to a directory is the directory it names
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFileError(path, "it is not a directory; acp-bridge will not use it")
    if st.st_uid not in (os.geteuid(), _ROOT):
        reason = f"the directory is owned by uid {st.st_uid}, who could replace files in it"
    elif st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(st.st_mode)
        reason = f"other users can replace files in the directory (mode {mode:04o}, not sticky)"
    else:
        return
    raise UnsafeFileError(path, f"{reason}; acp-bridge will not keep private files there")


def create_private_file(path: str) -> bool:
    """Create ``path`` empty, mode 0600, if nothing is there (not even a dangling symbolic
    link); True if this call created it. Opened ``O_EXCL | O_NOFOLLOW``: never through a link.

    Raises:
        OSError: it could not be created for another reason (a missing directory, EACCES).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # the umask may have taken bits away; never adds any
    finally:
        os.close(fd)
    return True


def open_private_directory(path: str, *, create: bool) -> int:
    """A descriptor of the private directory ``path`` (created 0700 if missing and ``create``),
    for :func:`open_private_file`'s ``dir_fd``. The caller closes it.

    Raises:
        UnsafeFileError: a symbolic link, not a directory, not yours, or writable by others.
        OSError: it could not be created or opened (missing, without ``create``).
    """
    created = False
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, PRIVATE_DIR_MODE)
            created = True
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except NotADirectoryError:
        raise UnsafeFileError(path, "it is not a directory; acp-bridge will not use it") from None
    except OSError:
        _refuse_link(path, None)
        raise
    try:
        if created:
            os.fchmod(fd, PRIVATE_DIR_MODE)  # the umask may have taken bits away
        check_private(os.fstat(fd), path, directory=True, fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private_file(
    name: str, *, dir_fd: int, shown_as: str, flags: int = os.O_RDWR, create: bool = True
) -> int:
    """Open the private file ``name`` in the directory ``dir_fd`` (created 0600 if missing and
    ``create``), never through a symbolic link, and check it: also refused when it has other
    hard links (changing it would change another name's file too). The caller closes it.

    ``shown_as``: the path named in errors.

    Raises:
        UnsafeFileError: not a private regular file of yours (see the module's text).
        OSError: it could not be opened or created.
    """
    base = flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    created = False
    fd: int | None = None
    if create:
        with contextlib.suppress(FileExistsError):
            fd = os.open(name, base | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE, dir_fd=dir_fd)
            created = True
    if fd is None:
        try:
            fd = os.open(name, base, dir_fd=dir_fd)
        except OSError:
            _refuse_link(name, dir_fd, shown_as=shown_as)
            raise
    try:
        if created:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        st = os.fstat(fd)
        check_private(st, shown_as, fd=fd)
        if st.st_nlink > 1:
            raise UnsafeFileError(
                shown_as, f"it has {st.st_nlink} hard links; acp-bridge will not use it"
            )
        _blocking(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = PRIVATE_FILE_MODE) -> int:
    """Open ``path`` (symbolic links followed) only if it is a regular file, never blocking on
    a FIFO: looked at first, opened ``O_NONBLOCK``, checked again with ``fstat``. With
    ``os.O_CREAT`` in ``flags``, a missing file is created with ``mode`` exactly (whatever the
    umask; 0600 unless told). The caller closes the descriptor; it is blocking again.

    Raises:
        UnsafeFileError: it is not a regular file (a FIFO, a device, a directory, a socket).
        OSError: it could not be opened (missing without ``os.O_CREAT``, EACCES, ...).
    """
    try:
        _refuse_irregular(os.stat(path).st_mode, path)
        existed = True
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
        existed = False
    base = flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd: int | None = None
    created = False
    if not existed:
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, base | os.O_EXCL, mode)
            created = True
    if fd is None:
        fd = os.open(path, base, mode)
    try:
        _refuse_irregular(os.fstat(fd).st_mode, path)
        if created:
            os.fchmod(fd, mode)  # the umask may have taken bits away
        _blocking(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`), at most ``limit + 1``
    of them when a ``limit`` is given (so the caller can tell a file over it).

    Raises:
        UnsafeFileError: not a regular file.
        OSError: it could not be read.
    """
    with os.fdopen(open_regular(path), "rb") as file:
        return file.read() if limit is None else file.read(limit + 1)


def _kind_problem(mode: int, *, directory: bool) -> str | None:
    if stat.S_ISLNK(mode):
        return "it is a symbolic link"
    if directory:
        return None if stat.S_ISDIR(mode) else "it is not a directory"
    return None if stat.S_ISREG(mode) else f"it is {_kind(mode)}, not a regular file"


def _refuse_irregular(mode: int, path: str) -> None:
    if not stat.S_ISREG(mode):
        raise UnsafeFileError(path, f"it is {_kind(mode)}, not a regular file")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def _refuse_link(name: str, dir_fd: int | None, *, shown_as: str | None = None) -> None:
    """After an ``O_NOFOLLOW`` open failed: a symbolic link there is the reason (Linux says
    ELOOP, the BSDs other things), said as such."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeFileError(
            shown_as or name, "it is a symbolic link; acp-bridge will not follow it"
        )


def _blocking(fd: int) -> None:
    os.set_blocking(fd, True)


def _read_only_fs(where: str | int) -> bool:
    """True on a file system mounted read-only (``where``: a path or a descriptor), where no
    user can write anything."""
    try:
        return bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
