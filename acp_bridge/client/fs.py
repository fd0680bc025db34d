"""``fs/read_text_file`` and ``fs/write_text_file``, confined to a session's roots.

acp-protocol.md section 5. A session's roots are its ``cwd`` plus its ``additionalDirectories``;
``roots(session_id)`` supplies them (None for a session we do not know).

Confinement. The requested path must be absolute. It is resolved with every symlink followed
(``Path.resolve``), and so are the roots; the resolved path must lie inside a resolved root.
That one check refuses ``..`` traversal, a symlink inside a root that points outside, and a
symlinked parent directory, because all of them resolve to somewhere outside. The file is then
opened at its *resolved* path: a read uses ``O_NOFOLLOW``, and a write ``rename``s onto it (a
rename replaces a link rather than following it), so swapping the last component for a symlink
after the check gains nothing. A directory swapped for a symlink between the check and the
open can still race us; only code already running as this user can do that.

Only regular files. A FIFO, a device, a socket or a directory is refused, for reads and for
writes onto an existing path. A read ``lstat``s first, so a device is not even opened (opening
one can have effects: a tape rewinds, a tty becomes ours), then opens with ``O_NONBLOCK |
O_NOCTTY`` and checks ``fstat`` of the opened descriptor, which is the authority: a FIFO swapped
in after the ``lstat`` opens at once (``O_NONBLOCK``) and is refused, instead of blocking the
worker thread until a writer appears. A read runs in a worker thread that is abandoned when the
request is cancelled (it holds nothing but its own descriptor, and its result is dropped), so a
read never outlives its cancel scope, even on a hung network mount; the thread itself ends when
the kernel lets it. A write is not abandoned (it must remove its temporary file), but it opens
nothing that can block: a new temporary file and the target's directory.

Errors (``data`` always holds ``path`` and a machine-readable ``reason``):

==========================================  =======  ==========================================
case                                        code     reason
==========================================  =======  ==========================================
capability not enabled                      -32601   (``data: {method}``)
unknown session                             -32002   ``unknown_session`` (SDKs use -32002 too)
missing file (read)                         -32002   ``resource_not_found`` shape: ``{uri}``
relative path                               -32602   ``not_absolute``
outside every root                          -32602   ``outside_roots``
not a regular file (directory, FIFO, ...)   -32602   ``not_a_file`` (+ ``kind``)
a NUL byte in the path                      -32602   ``nul_byte``
a path not encodable as UTF-8 (surrogate)   -32602   ``not_utf8``
larger than ``max_read_bytes``              -32602   ``too_large`` (+ ``size``, ``limit``)
not valid UTF-8 (read)                      -32602   ``not_utf8``
content not encodable as UTF-8 (write)      -32602   ``not_utf8``
a symlink loop                              -32602   ``unresolvable``
any other OS error (permissions, ...)       -32603   ``os_error`` (+ ``error``: strerror)
==========================================  =======  ==========================================

Decisions:

* **Text is strict UTF-8.** Invalid bytes are an error, not U+FFFD: an agent that read a file
  with replacement characters and wrote it back would silently corrupt it. Line endings and a
  BOM are returned as they are.
* **line/limit.** ``line`` is 1-based (0 or absent means 1); ``limit`` counts lines (absent:
  to the end; 0: nothing). A line ends at ``\\n`` only (a ``\\r\\n`` line keeps its ``\\r``),
  and keeps its terminator.
* **Size.** A file over ``max_read_bytes`` is refused even when ``line``/``limit`` ask for a
  small window: the cap bounds the work done, not only the answer.
* **Atomic writes.** The content goes to a new temporary file in the target's directory, is
  fsynced, and replaces the target with ``os.replace``; then the directory is fsynced. Readers
  see the old file or the new one, never a half-written one. An existing file keeps its
  permission bits (not its owner, and a hard link to it is broken, as with any rename-based
  save); a new file gets ``0o666`` minus the umask, as ``open()`` would give it.
* **Parent directories** that are missing are created, as long as the target is inside a root
  (then every directory between the root and the target is inside it too).

Blocking file work runs in ``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

import anyio

from acp_bridge.errors import ErrorCode, RpcError

__all__ = ["DEFAULT_MAX_READ_BYTES", "READ_METHOD", "WRITE_METHOD", "FileSystemAccess", "RootsFn"]

READ_METHOD: Final = "fs/read_text_file"
WRITE_METHOD: Final = "fs/write_text_file"

DEFAULT_MAX_READ_BYTES: Final = 64 * 1024 * 1024

RootsFn = Callable[[str], Sequence[Path] | None]
"""``roots(session_id)``: the session's cwd and additional directories, or None if unknown."""

_NEW_FILE_MODE: Final = 0o666  # the kernel applies the umask


def _refuse(code: int, message: str, path: str, reason: str, **extra: Any) -> NoReturn:
    raise RpcError(code, message, {"path": path, "reason": reason, **extra})


# File type bits -> (``data.kind``, words for the message).
_KINDS: Final = {
    stat.S_IFDIR: ("directory", "a directory"),
    stat.S_IFIFO: ("fifo", "a FIFO (named pipe)"),
    stat.S_IFCHR: ("char_device", "a character device"),
    stat.S_IFBLK: ("block_device", "a block device"),
    stat.S_IFSOCK: ("socket", "a socket"),
    stat.S_IFLNK: ("symlink", "a symbolic link"),
}


def _not_a_file(mode: int, path: str) -> RpcError:
    """-32602 naming the path and what it is instead of a regular file."""
    kind, words = _KINDS.get(stat.S_IFMT(mode), ("other", "not a regular file"))
    return RpcError(
        ErrorCode.INVALID_PARAMS,
        f"{path} is {words}; only regular files can be read or written",
        {"path": path, "reason": "not_a_file", "kind": kind},
    )


def _require_regular_file(mode: int, path: str) -> None:
    if not stat.S_ISREG(mode):
        raise _not_a_file(mode, path)


def _check_path_text(path: str) -> None:
    """A NUL byte or a lone surrogate cannot reach the OS: refuse, rather than let ``os``
    raise ValueError (which would be answered -32603 with a logged traceback)."""
    if "\0" in path:
        _refuse(ErrorCode.INVALID_PARAMS, "Path contains a NUL byte", path, "nul_byte")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        _refuse(ErrorCode.INVALID_PARAMS, "Path is not valid Unicode text", path, "not_utf8")


def _os_error(path: str, exc: OSError) -> RpcError:
    if isinstance(exc, FileNotFoundError):
        return RpcError.resource_not_found(path)
    if isinstance(exc, IsADirectoryError):
        return _not_a_file(stat.S_IFDIR, path)
    error = exc.strerror or type(exc).__name__
    return RpcError(
        ErrorCode.INTERNAL_ERROR,
        f"File system error: {error}",
        {"path": path, "reason": "os_error", "error": error},
    )


class FileSystemAccess:
    """The ``fs/*`` handlers of one client, confined to each session's roots.

    Register :meth:`read_text_file` and :meth:`write_text_file` with the peer; advertise
    ``fs.readTextFile``/``fs.writeTextFile`` only when ``allow_read``/``allow_write`` are set
    (a disabled method answers -32601 anyway).
    """

    def __init__(
        self,
        roots: RootsFn,
        *,
        allow_read: bool,
        allow_write: bool,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> None:
        self._roots = roots
        self.allow_read = allow_read
        self.allow_write = allow_write
        self.max_read_bytes = max_read_bytes

    def __repr__(self) -> str:
        return (
            f"<FileSystemAccess read={self.allow_read} write={self.allow_write}"
            f" max_read_bytes={self.max_read_bytes}>"
        )

    async def read_text_file(self, params: Any) -> dict[str, Any]:
        """``fs/read_text_file``: ``{sessionId, path, line?, limit?}`` -> ``{content}``.

        Raises:
            RpcError: see the module docstring's table.
            pydantic.ValidationError: malformed params (answered -32602).
        """
        if not self.allow_read:
            raise RpcError.method_not_found(READ_METHOD)
        # Imported here: the fs models are not needed until an agent reads a file.
        from acp_bridge.wire.client_methods import ReadTextFileRequest, ReadTextFileResponse

        request = ReadTextFileRequest.parse(params)
        roots = self._session_roots(request.session_id, request.path)
        # Abandoned on cancel: the thread holds only its own descriptor (module docstring).
        content = await anyio.to_thread.run_sync(
            self._read_sync,
            roots,
            request.path,
            request.line,
            request.limit,
            abandon_on_cancel=True,
        )
        return ReadTextFileResponse(content=content).dump()

    async def write_text_file(self, params: Any) -> None:
        """``fs/write_text_file``: ``{sessionId, path, content}`` -> ``null``.

        Raises:
            RpcError: see the module docstring's table.
            pydantic.ValidationError: malformed params (answered -32602).
        """
        if not self.allow_write:
            raise RpcError.method_not_found(WRITE_METHOD)
        from acp_bridge.wire.client_methods import WriteTextFileRequest

        request = WriteTextFileRequest.parse(params)
        roots = self._session_roots(request.session_id, request.path)
        await anyio.to_thread.run_sync(self._write_sync, roots, request.path, request.content)

    # --- checks -----------------------------------------------------------------------------

    def _session_roots(self, session_id: str, path: str) -> Sequence[Path]:
        roots = self._roots(session_id)
        if roots is None:
            _refuse(
                ErrorCode.RESOURCE_NOT_FOUND,
                "Unknown session",
                path,
                "unknown_session",
                sessionId=session_id,
            )
        _check_path_text(path)
        if not os.path.isabs(path):
            _refuse(ErrorCode.INVALID_PARAMS, "Path must be absolute", path, "not_absolute")
        return roots

    @staticmethod
    def _confine(roots: Sequence[Path], path: str) -> Path:
        """``path`` with every symlink resolved, if that lies inside a resolved root."""
        try:
            resolved = Path(path).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                "Path cannot be resolved",
                {"path": path, "reason": "unresolvable", "error": str(exc)},
            ) from exc
        for root in roots:
            with contextlib.suppress(OSError, RuntimeError):
                if resolved.is_relative_to(root.resolve()):
                    return resolved
        _refuse(
            ErrorCode.INVALID_PARAMS, "Path is outside the session roots", path, "outside_roots"
        )

    # --- blocking work (worker threads) -----------------------------------------------------

    def _read_sync(
        self, roots: Sequence[Path], path: str, line: int | None, limit: int | None
    ) -> str:
        target = self._confine(roots, path)
        data = self._read_bytes(target, path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            _refuse(
                ErrorCode.INVALID_PARAMS,
                "File is not valid UTF-8 text",
                path,
                "not_utf8",
                offset=exc.start,
            )
        if line is None and limit is None:
            return text
        start = max(line or 1, 1) - 1
        lines = _split_lines(text)
        stop = len(lines) if limit is None else start + limit
        return "".join(lines[start:stop])

    def _read_bytes(self, target: Path, path: str) -> bytes:
        limit = self.max_read_bytes
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        try:
            # Not even opened unless it is a regular file now; fstat below decides.
            _require_regular_file(os.stat(target, follow_symlinks=False).st_mode, path)
            fd = os.open(target, flags)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        try:
            info = os.fstat(fd)
            _require_regular_file(info.st_mode, path)  # what we opened, not what we checked
            if info.st_size > limit:
                self._too_large(path, info.st_size)
            with os.fdopen(fd, "rb", closefd=False) as file:
                data = file.read(limit + 1)  # the file may have grown since fstat
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            os.close(fd)
        if len(data) > limit:
            self._too_large(path, len(data))
        return data

    def _too_large(self, path: str, size: int) -> NoReturn:
        _refuse(
            ErrorCode.INVALID_PARAMS,
            f"File is larger than the {self.max_read_bytes}-byte read limit",
            path,
            "too_large",
            size=size,
            limit=self.max_read_bytes,
        )

    def _write_sync(self, roots: Sequence[Path], path: str, content: str) -> None:
        target = self._confine(roots, path)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            _refuse(ErrorCode.INVALID_PARAMS, "Content is not encodable as UTF-8", path, "not_utf8")
        try:
            info = os.stat(target, follow_symlinks=False)
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise _os_error(path, exc) from exc
        else:
            _require_regular_file(info.st_mode, path)  # never replace a FIFO, device, socket
            mode = stat.S_IMODE(info.st_mode)
        try:
            _write_atomically(target, data, mode)
        except OSError as exc:
            raise _os_error(path, exc) from exc


def _split_lines(text: str) -> list[str]:
    """Lines ending at ``\\n`` (kept), unlike ``splitlines``, which also splits at ``\\r``,
    form feeds and U+2028 and would disagree with the agent's editor about line numbers."""
    lines = text.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])


def _write_atomically(target: Path, data: bytes, mode: int | None) -> None:
    """Temp file beside ``target``, fsync, ``os.replace``, fsync the directory.

    ``mode``: the permission bits of the existing regular file, None when there is none
    (then missing parent directories are created).
    """
    if mode is None:
        target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, _NEW_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable. Best effort: some file systems refuse to fsync a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
