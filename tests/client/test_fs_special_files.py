"""fs requests for what is not a regular file, and reads that must not outlive their cancel scope.

Regressions for issue 7, defect 9: a read of a FIFO blocked a worker thread in ``open`` until a
writer appeared (forever), and the request's cancel scope waited for that thread, so the
quarantine never finished and the bridge could not be stopped. Waits here are bounded by
watchdogs that unblock the old code's stuck thread, so a regression fails instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path, PosixPath
from typing import Any

import anyio
import pytest

from acp_bridge.client.fs import FileSystemAccess
from acp_bridge.errors import ErrorCode, RpcError

pytestmark = pytest.mark.anyio

PROMPT_S = 1.0  # "at once": the old code took the watchdog's WATCHDOG_S
WATCHDOG_S = 5.0


def access(roots: list[Path]) -> FileSystemAccess:
    return FileSystemAccess({"s1": roots}.get, allow_read=True, allow_write=True)


async def read(fs: FileSystemAccess, path: Path | str) -> Any:
    return await fs.read_text_file({"sessionId": "s1", "path": str(path)})


async def write(fs: FileSystemAccess, path: Path | str, content: str = "x") -> Any:
    return await fs.write_text_file({"sessionId": "s1", "path": str(path), "content": content})


async def refusal(call: Any) -> RpcError:
    with pytest.raises(RpcError) as info:
        await call
    assert info.value.code == ErrorCode.INVALID_PARAMS, info.value
    return info.value


@pytest.fixture
def root(tmp_path: Path) -> Path:
    directory = tmp_path.resolve() / "project"
    directory.mkdir()
    return directory


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A root with a short path: a Unix socket's path is limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="fs", dir="/tmp") as name:
        yield Path(name).resolve()


def _open_writer_briefly(fifo: Path) -> None:
    with contextlib.suppress(OSError):  # ENXIO: nobody is reading, nothing to free
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@contextlib.contextmanager
def fifo_watchdog(fifo: Path) -> Iterator[None]:
    """After WATCHDOG_S, frees a reader stuck in ``open`` (the old code): fail, don't hang."""
    watchdog = threading.Timer(WATCHDOG_S, _open_writer_briefly, [fifo])
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


async def test_a_fifo_is_refused_at_once_and_never_opened_for_a_blocking_read(root: Path) -> None:
    fifo = root / "pipe"
    os.mkfifo(fifo)
    with fifo_watchdog(fifo):
        started = anyio.current_time()
        error = await refusal(read(access([root]), fifo))
        elapsed = anyio.current_time() - started
    assert elapsed < PROMPT_S, f"the read of a FIFO took {elapsed:.1f}s"
    assert error.data == {"path": str(fifo), "reason": "not_a_file", "kind": "fifo"}
    assert str(fifo) in error.message and "FIFO" in error.message


@pytest.mark.parametrize(("device", "kind"), [("null", "char_device"), ("zero", "char_device")])
async def test_a_device_is_refused_with_what_it_is(device: str, kind: str) -> None:
    fs = access([Path("/dev")])
    error = await refusal(read(fs, f"/dev/{device}"))
    assert error.data == {"path": f"/dev/{device}", "reason": "not_a_file", "kind": kind}
    assert "character device" in error.message
    error = await refusal(write(fs, f"/dev/{device}"))
    assert error.data["kind"] == kind
    assert stat.S_ISCHR(os.stat(f"/dev/{device}").st_mode)


async def test_a_directory_is_refused_with_what_it_is(root: Path) -> None:
    fs = access([root])
    (root / "sub").mkdir()
    for operation in (read, write):
        error = await refusal(operation(fs, root / "sub"))
        expected = {"path": str(root / "sub"), "reason": "not_a_file", "kind": "directory"}
        assert error.data == expected
        assert "directory" in error.message


async def test_a_socket_is_refused_not_an_os_error(short_root: Path) -> None:
    path = short_root / "s.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        error = await refusal(read(access([short_root]), path))
        assert error.data == {"path": str(path), "reason": "not_a_file", "kind": "socket"}
        error = await refusal(write(access([short_root]), path))
        assert error.data["kind"] == "socket"
        assert stat.S_ISSOCK(path.stat().st_mode)


async def test_a_write_onto_a_fifo_is_refused_and_leaves_it_a_fifo(root: Path) -> None:
    fifo = root / "pipe"
    os.mkfifo(fifo)
    error = await refusal(write(access([root]), fifo, "replaced?"))
    assert error.data == {"path": str(fifo), "reason": "not_a_file", "kind": "fifo"}
    assert stat.S_ISFIFO(fifo.stat(follow_symlinks=False).st_mode)
    assert os.listdir(root) == ["pipe"]  # no temporary file left


async def test_a_symlink_to_a_fifo_inside_the_roots_is_refused(root: Path) -> None:
    os.mkfifo(root / "pipe")
    (root / "alias").symlink_to(root / "pipe")
    with fifo_watchdog(root / "pipe"):
        error = await refusal(read(access([root]), root / "alias"))
    assert error.data["kind"] == "fifo"


async def test_a_nul_byte_in_the_path_is_invalid_params_not_an_internal_error(root: Path) -> None:
    fs = access([root])
    bad = f"{root}/notes\0.txt"
    for operation in (read, write):
        error = await refusal(operation(fs, bad))
        assert error.data == {"path": bad, "reason": "nul_byte"}
    assert os.listdir(root) == []


async def test_a_lone_surrogate_in_the_path_is_invalid_params(root: Path) -> None:
    fs = access([root])
    bad = f"{root}/\ud800.txt"  # what JSON "\\ud800" decodes to
    for operation in (read, write):
        error = await refusal(operation(fs, bad))
        assert error.data == {"path": bad, "reason": "not_utf8"}
    assert os.listdir(root) == []


async def test_a_read_never_outlives_its_cancel_scope(root: Path) -> None:
    """A root on a hung network mount: resolving it blocks the worker thread. Cancelling the
    request returns at once; the old code waited for the thread (here: for the watchdog)."""
    entered, release = threading.Event(), threading.Event()

    class HungMount(PosixPath):
        def resolve(self, strict: bool = False) -> HungMount:
            entered.set()
            release.wait(WATCHDOG_S * 4)
            return super().resolve(strict)

    (root / "notes.txt").write_text("hello\n")
    fs = access([HungMount(root)])
    watchdog = threading.Timer(WATCHDOG_S, release.set)
    watchdog.start()
    try:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read, fs, root / "notes.txt")
                assert await anyio.to_thread.run_sync(entered.wait, WATCHDOG_S)
                started = anyio.current_time()
                scope.cancel()
        elapsed = anyio.current_time() - started
    finally:
        release.set()
        watchdog.cancel()
    assert scope.cancelled_caught
    assert elapsed < PROMPT_S, f"the cancelled read took {elapsed:.1f}s"
    # Once the mount answers again, reads work as before.
    assert await read(fs, root / "notes.txt") == {"content": "hello\n"}
