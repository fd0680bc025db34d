"""The host's bearer token file: made 0600 when missing, refused when it is not a private file."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from acp_bridge.errors import UnsafeFileError
from acp_bridge.host.tokens import MAX_TOKEN_BYTES, load_or_create_token, load_token


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_token_file_is_created_0600_even_under_umask_000(
    tmp_path: Path, umask_000: None
) -> None:
    path = tmp_path / "token"
    token = load_or_create_token(path)
    assert _mode(path) == 0o600
    assert len(token) >= 43 and token.isascii() and " " not in token
    assert path.read_text() == token + "\n"


def test_the_token_is_read_back_unchanged_and_not_made_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    first = load_or_create_token(path)
    assert load_or_create_token(path) == first
    assert load_token(path) == first


def test_a_token_written_by_hand_without_a_newline_is_read(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"s3cret-Token_value")
    path.chmod(0o600)
    assert load_token(path) == "s3cret-Token_value"


def test_load_token_never_creates_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_token(tmp_path / "token")
    assert not (tmp_path / "token").exists()


def test_a_symbolic_link_in_place_of_the_token_file_is_refused_not_followed(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("planted\n")
    target.chmod(0o600)
    link = tmp_path / "token"
    link.symlink_to(target)
    for load in (load_token, load_or_create_token):
        with pytest.raises(UnsafeFileError, match="symbolic link"):
            load(link)
    assert target.read_text() == "planted\n"


def test_a_dangling_symbolic_link_is_refused_and_nothing_is_created_through_it(
    tmp_path: Path,
) -> None:
    link = tmp_path / "token"
    link.symlink_to(tmp_path / "missing")
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        load_or_create_token(link)
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_token_file_others_can_read_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "token"
    path.write_text("abc\n")
    path.chmod(mode)
    with pytest.raises(UnsafeFileError, match=r"can read this token .*chmod 600") as caught:
        load_or_create_token(path)
    assert str(path) in str(caught.value)
    assert _mode(path) == mode  # refused, not changed


def test_a_token_file_others_can_write_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("abc\n")
    path.chmod(0o620)
    with pytest.raises(UnsafeFileError, match="another user can write it"):
        load_token(path)


def test_a_directory_in_place_of_the_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").mkdir()
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        load_or_create_token(tmp_path / "token")


def test_a_token_file_in_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeFileError, match="other users can replace files"):
        load_or_create_token(shared / "token")
    assert not (shared / "token").exists()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b"\n", "empty"),
        (b"two words\n", "printable ASCII without spaces"),
        (b"line\nline\n", "printable ASCII without spaces"),
        (b"x" * (MAX_TOKEN_BYTES + 1), "longer than a token"),
    ],
)
def test_a_file_that_holds_no_token_is_refused(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(UnsafeFileError, match=reason):
        load_token(path)
