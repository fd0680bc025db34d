"""FileSystemAccess against a real temporary tree: confinement, line windows, atomic writes."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.client.fs import FileSystemAccess
from acp_bridge.errors import ErrorCode, RpcError

pytestmark = pytest.mark.anyio


@dataclass
class Tree:
    """A session root, an extra root, and a secret outside both."""

    root: Path
    extra: Path
    outside: Path
    sessions: dict[str, list[Path]] = field(default_factory=dict)

    def roots(self, session_id: str) -> Sequence[Path] | None:
        return self.sessions.get(session_id)

    def access(self, *, read: bool = True, write: bool = True, **kwargs: Any) -> FileSystemAccess:
        return FileSystemAccess(self.roots, allow_read=read, allow_write=write, **kwargs)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    root, extra, outside = tmp_path / "project", tmp_path / "extra", tmp_path / "outside"
    for directory in (root, extra, outside):
        directory.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    (root / "notes.txt").write_text("one\ntwo\nthree\nfour\n")
    return Tree(root, extra, outside, {"s1": [root, extra]})


async def read(fs: FileSystemAccess, path: Path | str, **extra: Any) -> str:
    result = await fs.read_text_file({"sessionId": "s1", "path": str(path), **extra})
    content: str = result["content"]
    return content


async def write(fs: FileSystemAccess, path: Path | str, content: str, session: str = "s1") -> Any:
    return await fs.write_text_file({"sessionId": session, "path": str(path), "content": content})


async def refused(call: Any, code: int, reason: str | None) -> RpcError:
    with pytest.raises(RpcError) as info:
        await call
    assert info.value.code == code
    if reason is not None:
        assert info.value.data["reason"] == reason
    return info.value


# --- reading ---------------------------------------------------------------------------------


async def test_a_whole_file_is_read(tree: Tree) -> None:
    assert await read(tree.access(), tree.root / "notes.txt") == "one\ntwo\nthree\nfour\n"


@pytest.mark.parametrize(
    ("window", "content"),
    [
        ({"line": 2}, "two\nthree\nfour\n"),
        ({"line": 2, "limit": 2}, "two\nthree\n"),
        ({"limit": 1}, "one\n"),
        ({"line": 1, "limit": 0}, ""),
        ({"line": 0, "limit": 1}, "one\n"),  # 0 is read as 1
        ({"line": 4, "limit": 10}, "four\n"),
        ({"line": 9}, ""),
    ],
)
async def test_line_is_1_based_and_limit_counts_lines(
    tree: Tree, window: dict[str, int], content: str
) -> None:
    assert await read(tree.access(), tree.root / "notes.txt", **window) == content


async def test_line_endings_and_non_ascii_text_come_back_unchanged(tree: Tree) -> None:
    (tree.root / "crlf.txt").write_bytes("héllo\r\nwörld €\r\n".encode())
    fs = tree.access()
    assert await read(fs, tree.root / "crlf.txt") == "héllo\r\nwörld €\r\n"
    assert await read(fs, tree.root / "crlf.txt", line=2) == "wörld €\r\n"


async def test_a_missing_file_is_resource_not_found_with_its_uri(tree: Tree) -> None:
    missing = tree.root / "nope.txt"
    error = await refused(read(tree.access(), missing), ErrorCode.RESOURCE_NOT_FOUND, None)
    assert error.data == {"uri": str(missing)}


async def test_a_relative_path_is_refused(tree: Tree) -> None:
    error = await refused(
        read(tree.access(), "notes.txt"), ErrorCode.INVALID_PARAMS, "not_absolute"
    )
    assert error.data["path"] == "notes.txt"


async def test_dot_dot_traversal_out_of_the_root_is_refused(tree: Tree) -> None:
    sneaky = f"{tree.root}/../outside/secret.txt"
    error = await refused(read(tree.access(), sneaky), ErrorCode.INVALID_PARAMS, "outside_roots")
    assert error.data["path"] == sneaky
    await refused(write(tree.access(), sneaky, "pwned"), ErrorCode.INVALID_PARAMS, "outside_roots")
    assert (tree.outside / "secret.txt").read_text() == "top secret\n"


async def test_dot_dot_that_stays_inside_the_root_is_fine(tree: Tree) -> None:
    (tree.root / "sub").mkdir()
    assert await read(tree.access(), f"{tree.root}/sub/../notes.txt", limit=1) == "one\n"


async def test_a_symlinked_file_pointing_outside_is_refused(tree: Tree) -> None:
    link = tree.root / "innocent.txt"
    link.symlink_to(tree.outside / "secret.txt")
    fs = tree.access()
    await refused(read(fs, link), ErrorCode.INVALID_PARAMS, "outside_roots")
    await refused(write(fs, link, "pwned"), ErrorCode.INVALID_PARAMS, "outside_roots")
    assert (tree.outside / "secret.txt").read_text() == "top secret\n"


async def test_a_dangling_symlink_pointing_outside_cannot_create_a_file_there(tree: Tree) -> None:
    (tree.root / "dangling.txt").symlink_to(tree.outside / "new.txt")
    await refused(
        write(tree.access(), tree.root / "dangling.txt", "x"),
        ErrorCode.INVALID_PARAMS,
        "outside_roots",
    )
    assert not (tree.outside / "new.txt").exists()


async def test_a_symlinked_directory_pointing_outside_is_refused(tree: Tree) -> None:
    (tree.root / "docs").symlink_to(tree.outside, target_is_directory=True)
    fs = tree.access()
    await refused(read(fs, tree.root / "docs" / "secret.txt"), ErrorCode.INVALID_PARAMS, None)
    await refused(
        write(fs, tree.root / "docs" / "planted.txt", "x"), ErrorCode.INVALID_PARAMS, None
    )
    assert sorted(p.name for p in tree.outside.iterdir()) == ["secret.txt"]


async def test_a_symlink_that_stays_inside_the_roots_is_followed(tree: Tree) -> None:
    (tree.root / "alias.txt").symlink_to(tree.root / "notes.txt")
    fs = tree.access()
    assert await read(fs, tree.root / "alias.txt", limit=1) == "one\n"
    await write(fs, tree.root / "alias.txt", "replaced\n")
    assert (tree.root / "alias.txt").is_symlink()  # the link survives; its target changed
    assert (tree.root / "notes.txt").read_text() == "replaced\n"


async def test_a_root_reached_through_a_symlink_still_works(tree: Tree, tmp_path: Path) -> None:
    (tmp_path / "via-link").symlink_to(tree.root, target_is_directory=True)
    tree.sessions["s2"] = [tmp_path / "via-link"]
    result = await tree.access().read_text_file(
        {"sessionId": "s2", "path": str(tmp_path / "via-link" / "notes.txt"), "limit": 1}
    )
    assert result == {"content": "one\n"}


async def test_a_symlink_loop_is_refused(tree: Tree) -> None:
    (tree.root / "a").symlink_to(tree.root / "b")
    (tree.root / "b").symlink_to(tree.root / "a")
    await refused(read(tree.access(), tree.root / "a"), ErrorCode.INVALID_PARAMS, None)


async def test_an_unknown_session_is_refused(tree: Tree) -> None:
    fs = tree.access()
    call = fs.read_text_file({"sessionId": "nobody", "path": str(tree.root / "notes.txt")})
    error = await refused(call, ErrorCode.RESOURCE_NOT_FOUND, "unknown_session")
    assert error.data["sessionId"] == "nobody"
    await refused(
        write(fs, tree.root / "x.txt", "x", session="nobody"),
        ErrorCode.RESOURCE_NOT_FOUND,
        "unknown_session",
    )
    assert not (tree.root / "x.txt").exists()


async def test_a_disabled_read_is_method_not_found(tree: Tree) -> None:
    error = await refused(
        read(tree.access(read=False), tree.root / "notes.txt"), ErrorCode.METHOD_NOT_FOUND, None
    )
    assert error.data == {"method": "fs/read_text_file"}


async def test_a_disabled_write_is_method_not_found_and_writes_nothing(tree: Tree) -> None:
    error = await refused(
        write(tree.access(write=False), tree.root / "new.txt", "x"),
        ErrorCode.METHOD_NOT_FOUND,
        None,
    )
    assert error.data == {"method": "fs/write_text_file"}
    assert not (tree.root / "new.txt").exists()


async def test_a_file_over_the_read_limit_is_refused_clearly(tree: Tree) -> None:
    (tree.root / "big.txt").write_text("x" * 101)
    fs = tree.access(max_read_bytes=100)
    error = await refused(
        read(fs, tree.root / "big.txt", limit=1), ErrorCode.INVALID_PARAMS, "too_large"
    )
    assert (error.data["size"], error.data["limit"]) == (101, 100)
    assert "100" in error.message
    (tree.root / "fits.txt").write_text("x" * 100)
    assert await read(fs, tree.root / "fits.txt") == "x" * 100


async def test_invalid_utf8_is_an_error_not_replacement_characters(tree: Tree) -> None:
    (tree.root / "blob.bin").write_bytes(b"ok\n\xff\xfe\n")
    await refused(read(tree.access(), tree.root / "blob.bin"), ErrorCode.INVALID_PARAMS, "not_utf8")


async def test_reading_a_directory_is_refused(tree: Tree) -> None:
    await refused(read(tree.access(), tree.root), ErrorCode.INVALID_PARAMS, "not_a_file")


async def test_malformed_params_raise_a_validation_error(tree: Tree) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        await tree.access().read_text_file({"sessionId": "s1"})


# --- writing ---------------------------------------------------------------------------------


async def test_a_write_creates_a_missing_file_and_answers_null(tree: Tree) -> None:
    target = tree.root / "new.txt"
    assert await write(tree.access(), target, "fresh €\n") is None
    assert target.read_bytes() == "fresh €\n".encode()


async def test_a_write_creates_missing_parent_directories_inside_the_root(tree: Tree) -> None:
    target = tree.root / "a" / "b" / "c.txt"
    await write(tree.access(), target, "deep\n")
    assert target.read_text() == "deep\n"


async def test_a_new_file_gets_the_umask_default_mode(tree: Tree) -> None:
    umask = os.umask(0o022)
    try:
        await write(tree.access(), tree.root / "mode.txt", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tree.root / "mode.txt").stat().st_mode) == 0o644


async def test_a_write_replaces_the_whole_file_atomically_and_keeps_its_mode(tree: Tree) -> None:
    target = tree.root / "script.sh"
    target.write_text("#!/bin/sh\necho old old old old old\n")
    target.chmod(0o751)
    old_inode = target.stat().st_ino
    content = "#!/bin/sh\n" + "echo new\n" * 10_000
    await write(tree.access(), target, content)
    assert target.read_text() == content
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    # Replaced by rename, not rewritten in place: a reader holding the old file saw it whole.
    assert target.stat().st_ino != old_inode
    assert sorted(p.name for p in tree.root.iterdir()) == ["notes.txt", "script.sh"]


async def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tree: Tree) -> None:
    target = tree.root / "notes.txt"
    with pytest.raises(RpcError) as info:
        await write(tree.access(), target, "bad \ud800 surrogate")
    assert info.value.data["reason"] == "not_utf8"
    assert target.read_text() == "one\ntwo\nthree\nfour\n"
    assert sorted(p.name for p in tree.root.iterdir()) == ["notes.txt"]


async def test_writing_onto_a_directory_is_refused_and_leaves_no_temp_file(tree: Tree) -> None:
    (tree.root / "dir").mkdir()
    await refused(
        write(tree.access(), tree.root / "dir", "x"), ErrorCode.INVALID_PARAMS, "not_a_file"
    )
    assert sorted(p.name for p in tree.root.iterdir()) == ["dir", "notes.txt"]


async def test_an_additional_directory_is_a_root_too(tree: Tree) -> None:
    fs = tree.access()
    await write(fs, tree.extra / "more.txt", "extra\n")
    assert await read(fs, tree.extra / "more.txt") == "extra\n"


async def test_a_root_of_another_session_is_outside(tree: Tree, tmp_path: Path) -> None:
    tree.sessions["s2"] = [tree.outside]
    await refused(
        read(tree.access(), tree.outside / "secret.txt"), ErrorCode.INVALID_PARAMS, "outside_roots"
    )


async def test_a_path_through_a_regular_file_is_an_os_error(tree: Tree) -> None:
    error = await refused(
        write(tree.access(), tree.root / "notes.txt" / "x.txt", "x"),
        ErrorCode.INTERNAL_ERROR,
        "os_error",
    )
    assert error.data["error"] == "Not a directory"
    assert (tree.root / "notes.txt").read_text() == "one\ntwo\nthree\nfour\n"


async def test_only_newline_ends_a_line(tree: Tree) -> None:
    (tree.root / "odd.txt").write_text("a\fb\u2028c\rd\r\ne\n", newline="")
    fs = tree.access()
    assert await read(fs, tree.root / "odd.txt", line=1, limit=1) == "a\fb\u2028c\rd\r\n"
    assert await read(fs, tree.root / "odd.txt", line=2) == "e\n"


async def test_a_concurrent_reader_sees_the_old_file_or_the_new_one_never_a_mix(
    tree: Tree,
) -> None:
    target = tree.root / "big.txt"
    old, new = "o" * 4_000_000, "n" * 8_000_000
    target.write_text(old)
    started, finished = threading.Event(), threading.Event()
    seen: set[int] = set()

    def watch() -> None:
        while not finished.is_set():
            data = target.read_text()
            assert data in (old, new), f"torn read of {len(data)} chars"
            seen.add(len(data))
            started.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, watch)
        await anyio.to_thread.run_sync(started.wait)
        try:
            for _ in range(3):
                await write(tree.access(), target, new)
                await write(tree.access(), target, old)
        finally:
            finished.set()
    assert seen and seen <= {len(old), len(new)}
    assert sorted(p.name for p in tree.root.iterdir()) == ["big.txt", "notes.txt"]
