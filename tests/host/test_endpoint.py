"""The host's socket directory and socket file (issue 22): private, or refused with one line."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from acp_bridge.host.endpoint import (
    HostEndpointError,
    HostRunningError,
    bind_socket,
    conversation_socket_path,
    default_socket_path,
    prepare_socket_dir,
)

OTHER_UID = 65534  # nobody
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="making another user's directory needs root (as here and in CI)"
)


def test_default_path_prefers_the_runtime_dir(tmp_path: Path) -> None:
    store = tmp_path / "store" / "q.db"
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run")}
    assert default_socket_path(store, env) == tmp_path / "run" / "acp-bridge" / "host.sock"
    assert default_socket_path(store, {}) == tmp_path / "store" / "q.db.host" / "host.sock"
    # a relative runtime dir is not one the session set up: beside the store
    assert default_socket_path(store, {"XDG_RUNTIME_DIR": "run"}).parent.name == "q.db.host"


def test_conversation_socket_is_in_the_socket_dir(tmp_path: Path) -> None:
    assert conversation_socket_path(tmp_path, "abc") == tmp_path / "c-abc.sock"
    with pytest.raises(ValueError):
        conversation_socket_path(tmp_path, "../x")


def test_directory_is_created_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077 ^ 0o777)  # a umask that would take everything away from the owner
    try:
        prepare_socket_dir(tmp_path / "a" / "sock")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "sock").stat().st_mode) == 0o700


def test_group_writable_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "sock"
    directory.mkdir()
    directory.chmod(0o770)
    with pytest.raises(HostEndpointError) as caught:
        prepare_socket_dir(directory)
    message = str(caught.value)
    assert str(directory) in message and "write" in message and "\n" not in message


def test_symlink_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "sock"
    link.symlink_to(real)
    with pytest.raises(HostEndpointError, match="symbolic link"):
        prepare_socket_dir(link)


@needs_root
def test_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    os.chown(directory, OTHER_UID, OTHER_UID)
    with pytest.raises(HostEndpointError, match=f"uid {OTHER_UID}") as caught:
        prepare_socket_dir(directory)
    assert str(directory) in str(caught.value)


def test_socket_is_0600_and_a_live_one_is_never_taken_over(tmp_path: Path) -> None:
    prepare_socket_dir(tmp_path / "s")
    path = tmp_path / "s" / "host.sock"
    old = os.umask(0)
    try:
        sock = bind_socket(path)
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        with pytest.raises(HostRunningError, match="already listening"):
            bind_socket(path)
    finally:
        sock.close()
    # the listener is gone, its file stays: stale, so the next host replaces it
    again = bind_socket(path)
    again.close()


def test_a_file_that_is_not_a_socket_is_not_replaced(tmp_path: Path) -> None:
    prepare_socket_dir(tmp_path / "s")
    path = tmp_path / "s" / "host.sock"
    path.write_text("mine")
    with pytest.raises(HostEndpointError, match="other than a socket"):
        bind_socket(path)
    assert path.read_text() == "mine"


def test_a_path_too_long_for_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ("x" * 120) / "host.sock"
    with pytest.raises(HostEndpointError, match="longer than"):
        bind_socket(path)


def test_a_bound_socket_accepts(tmp_path: Path) -> None:
    prepare_socket_dir(tmp_path / "s")
    path = tmp_path / "s" / "host.sock"
    sock = bind_socket(path)
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(path))
        client.close()
    finally:
        sock.close()
