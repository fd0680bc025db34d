"""The store's file on disk: what is checked before SQLite opens it, and that it stays in place.

SQLite opens the store by its path, and its ``-wal`` and ``-shm`` companions by their names, so
acp-bridge cannot hand it a descriptor it has checked. What it does instead (issue 21):

1. The store's directory must be one where no other user can swap entries
   (:func:`~acp_bridge.safe_files.check_directory`): a name that is yours there stays yours.
2. A new store is created by acp-bridge, mode 0600, ``O_CREAT | O_EXCL | O_NOFOLLOW``: never
   through a symbolic link, not even a dangling one, whatever the umask.
3. The file at the path, and its ``-wal`` and ``-shm`` if they exist, must be private regular
   files of yours (:func:`~acp_bridge.safe_files.check_private`). Looked at with ``lstat``,
   which tells what an ``O_NOFOLLOW`` open and ``fstat`` would, without a descriptor: closing
   any descriptor of a file drops every POSIX lock this process holds on it, SQLite's among
   them, and another connection of this process may have the store open.
4. Once SQLite has opened it (:meth:`StoreFile.verify_opened`, before anything is written but
   the schema): the path still names the file checked (same device and inode), and the
   companions SQLite made or found are private files of yours. A companion another user
   slipped in between (3) and SQLite's open is caught here: only an entry of yours can pass.
5. Before every commit (:meth:`StoreFile.is_in_place`, see
   :class:`~.store_connection.StoreConnection`): the path still names the file.

What remains. Between (3) and SQLite's open only you (or root) can replace your entries in the
store's directory; a directory above it that another user can write could have the store's
directory itself renamed away, which (4) and (5) detect, at the open or at the next commit. A
process of yours replacing the store is detected the same way.

Paths that are not files (``":memory:"``, ``file:`` URIs) are the caller's business: no checks.
"""

from __future__ import annotations

import os
import stat

from acp_bridge.errors import QueueStoreError, StoreReplacedError, UnsafeFileError
from acp_bridge.record import record
from acp_bridge.safe_files import check_directory, check_private, create_private_file

__all__ = ["COMPANIONS", "StoreFile", "is_file_path"]

COMPANIONS = ("-wal", "-shm")
"""The files SQLite keeps beside a store in WAL mode."""


def is_file_path(path: str) -> bool:
    """True for a path on disk; False for ``":memory:"`` and ``file:`` URIs."""
    return path != ":memory:" and not path.startswith("file:")


@record
class StoreFile:
    """The store's file as it was checked: its absolute path (a later ``chdir`` must not change
    the file), device and inode."""

    path: str
    device: int
    inode: int

    @classmethod
    def prepare(cls, path: str, *, create: bool) -> StoreFile:
        """Check (and with ``create``, create if missing) the store at ``path`` before SQLite
        opens it: steps 1 to 3 of the module's text.

        Raises:
            QueueStoreError: refused (the line says why), or missing without ``create``.
        """
        try:
            check_directory(os.path.dirname(os.path.abspath(path)))
            if create:
                create_private_file(path)
            st = os.lstat(path)
            check_private(st, path)
            _check_companions(path, required=False)
        except UnsafeFileError as exc:
            raise QueueStoreError(str(exc)) from exc
        except OSError as exc:
            raise QueueStoreError(f"cannot open the queue store {path}: {exc}") from exc
        return cls(os.path.abspath(path), st.st_dev, st.st_ino)

    def verify_opened(self, *, wal_expected: bool) -> None:
        """After SQLite opened the file: step 4 of the module's text. ``wal_expected``: the
        connection writes in WAL mode, so both companions must exist.

        Raises:
            QueueStoreError: the path names another file now, or a companion is refused.
        """
        if not self.is_in_place():
            raise StoreReplacedError(
                f"{self.path} was replaced or removed while it was being opened; nothing was "
                "written to it"
            )
        try:
            _check_companions(self.path, required=wal_expected)
        except UnsafeFileError as exc:
            raise QueueStoreError(str(exc)) from exc
        except OSError as exc:
            raise QueueStoreError(f"cannot check the queue store {self.path}: {exc}") from exc

    def is_in_place(self) -> bool:
        """True while the path names the file checked (not removed, moved away or replaced)."""
        try:
            st = os.lstat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.device, self.inode) and stat.S_ISREG(st.st_mode)

    def replaced_error(self, what: str) -> StoreReplacedError:
        """The error of a commit refused because the file is no longer at its path."""
        return StoreReplacedError(
            f"the queue store {self.path} was removed or replaced while this process used it; "
            f"could not {what} (nothing is committed to a file that is no longer the store)"
        )


def _check_companions(path: str, *, required: bool) -> None:
    for suffix in COMPANIONS:
        companion = path + suffix
        try:
            st = os.lstat(companion)
        except FileNotFoundError:
            if required:
                raise UnsafeFileError(
                    companion, "SQLite's file is missing beside the open store; refusing it"
                ) from None
            continue
        check_private(st, companion)
