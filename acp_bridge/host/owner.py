"""One owner process per conversation: an exclusive ``flock`` on a lock file next to the store.

The lock file is ``<store>.locks/<conversation id>.lock`` (directory 0700, file 0600, whatever
the umask). The owner writes its pid into it for the error message of a second process, and,
when it serves the conversation's endpoint (issue 22: a ``run`` or ``chat`` owner), the path of
its socket on the next line: a verb reads it with :func:`read_owner` and connects there. The
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

On a shared store (PostgreSQL, issue 23) there is no file to lock: the owner is whoever holds
the conversation's lease in the database (an advisory lock on the owner's session, which the
server releases when that session dies, and a fencing token in every write). A
:class:`LeaseOwner` takes it through the store
(:class:`~acp_bridge.conversation.store_api.SharedStore`); :func:`conversation_owner` picks
the owner that applies to a store.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from acp_bridge.conversation.store_api import ConversationOwnedError, SharedStore, Store
from acp_bridge.safe_files import open_private_directory, open_private_file

__all__ = [
    "ConversationBusyError",
    "ConversationOwner",
    "LeaseOwner",
    "OwnerInfo",
    "conversation_owner",
    "held_owner",
    "lock_path",
    "read_owner",
]

_LOCK_BYTES = 4096
"""The most of a lock file read (a pid and a socket path)."""


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

    @property
    def is_held(self) -> bool:
        return self._fd is not None

    def set_socket(self, socket_path: Path | None) -> None:
        """Write where this owner serves the conversation's endpoint (None: nowhere) into
        the lock file, after the pid. Only while the lock is held."""
        fd = self._fd
        if fd is None:
            raise RuntimeError("set_socket() without the lock")
        text = f"{os.getpid()}\n" + ("" if socket_path is None else f"{socket_path}\n")
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode("utf-8", "surrogateescape"), 0)

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
                raise ConversationBusyError(self.conversation_id, _read(fd).pid) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        _HELD[self.path] = self

    def release(self) -> None:
        if _HELD.get(self.path) is self:
            del _HELD[self.path]
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock


class LeaseOwner:
    """Holds a conversation's lease in a shared store from :meth:`acquire` until
    :meth:`release` (the same interface as :class:`ConversationOwner`)."""

    def __init__(self, store: SharedStore, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self._store = store
        self._held = False

    @property
    def is_held(self) -> bool:
        return self._held and self._store.owns(self.conversation_id)

    def acquire(self) -> None:
        """Take the lease now or raise :class:`ConversationBusyError` (never waits; an owner
        whose heartbeat stopped is taken over, see :mod:`acp_bridge.pgstore.lease`).

        Raises:
            ConversationBusyError: another live host owns it.
            QueueStoreError: the store failed.
        """
        try:
            self._store.own(self.conversation_id)
        except ConversationOwnedError as exc:
            raise ConversationBusyError(self.conversation_id, None) from exc
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._store.disown(self.conversation_id)


def conversation_owner(
    store: Store, store_path: Path, conversation_id: str
) -> ConversationOwner | LeaseOwner:
    """The owner of a conversation of ``store``: its lease for a shared store, else the lock
    file beside the SQLite file at ``store_path``."""
    if store.is_shared and isinstance(store, SharedStore):
        return LeaseOwner(store, conversation_id)
    return ConversationOwner(store_path, conversation_id)


_HELD: dict[Path, ConversationOwner] = {}
"""The locks this process holds, by lock file (one owner per conversation)."""


def held_owner(store_path: Path, conversation_id: str) -> ConversationOwner | None:
    """The lock of a conversation this process owns, if it does."""
    return _HELD.get(lock_path(store_path, conversation_id))


class OwnerInfo:
    """What a lock file says: the owner's pid and the socket it serves on (or None)."""

    def __init__(self, pid: int | None, socket: Path | None) -> None:
        self.pid = pid
        self.socket = socket


def read_owner(store_path: Path, conversation_id: str) -> OwnerInfo | None:
    """The live owner of a conversation, as its lock file says; None when nobody holds the
    lock (no file, or a stale one). Never takes the lock for longer than the check."""
    path = lock_path(store_path, conversation_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd)  # held: an owner is alive
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read(fd: int) -> OwnerInfo:
    try:
        text = os.pread(fd, _LOCK_BYTES, 0).decode("utf-8", "surrogateescape")
    except OSError:
        return OwnerInfo(None, None)
    lines = text.split("\n")
    first = lines[0].strip()
    pid = int(first) if first.isdigit() else None
    socket = Path(lines[1]) if len(lines) > 2 and lines[1] else None
    return OwnerInfo(pid, socket)
