"""One owner process per conversation: an exclusive ``flock`` on a lock file next to the store.

The lock file is ``<store>.locks/<conversation id>.lock`` (directory 0700, file 0600, whatever
the umask). The owner writes its pid into it for the error message of a second process. The
kernel releases the lock when the owner's descriptor closes, so a crashed owner (even after
``kill -9``) cannot keep it; a stale file with a dead pid in it holds nothing.

Both are private files (:mod:`acp_bridge.safe_files`, issue 21): the directory is opened
``O_NOFOLLOW`` and the lock file relative to that descriptor, ``O_NOFOLLOW`` too, and each is
checked with ``fstat`` before anything is changed. A locks directory or a lock file that another
user made or can write, a symbolic link planted in place of either, or a lock file with other
hard links is refused (:class:`~acp_bridge.errors.UnsafeFileError`): it is never truncated,
chmodded or written through. Only a lock file this process created is chmodded (to 0600).

The descriptor is not inherited by children (``os.open`` makes it non-inheritable), so an agent
that outlives the bridge does not keep the conversation locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from acp_bridge.safe_files import open_private_directory, open_private_file

__all__ = ["ConversationBusyError", "ConversationOwner", "lock_path"]

_PID_BYTES = 32
"""The most of a lock file read for the owner's pid."""


class ConversationBusyError(Exception):
    """Another live process owns the conversation."""

    def __init__(self, conversation_id: str, pid: int | None) -> None:
        owner = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"conversation {conversation_id} is in use by {owner}; wait for it to finish "
            "(one owner process at a time)"
        )
        self.conversation_id = conversation_id
        self.pid = pid


def lock_path(store_path: Path, conversation_id: str) -> Path:
    if not conversation_id or "/" in conversation_id or conversation_id in {".", ".."}:
        raise ValueError(f"not a conversation id: {conversation_id!r}")
    return store_path.parent / f"{store_path.name}.locks" / f"{conversation_id}.lock"


class ConversationOwner:
    """Holds a conversation's lock from :meth:`acquire` until :meth:`release` (or exit)."""

    def __init__(self, store_path: Path, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.path = lock_path(store_path, conversation_id)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock now or raise :class:`ConversationBusyError` (never waits).

        Raises:
            ConversationBusyError: another live process holds it.
            UnsafeFileError: the locks directory or the lock file is not a private file of
                yours (see the module's text); nothing was changed.
            OSError: the directory or the file could not be created or opened.
        """
        directory = open_private_directory(str(self.path.parent), create=True)
        try:
            fd = open_private_file(self.path.name, dir_fd=directory, shown_as=str(self.path))
        finally:
            os.close(directory)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConversationBusyError(self.conversation_id, _read_pid(fd)) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
