"""The store's file (issue 21): checked before SQLite opens it, opened read-only when only read,
and checked before every commit to still be the file at the store's path. The same rules
through the real ``acp-bridge`` are in tests/e2e/test_store_trust.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from acp_bridge.conversation.store import QueueStore
from acp_bridge.errors import QueueStoreError, StoreReplacedError
from tests.conversation.stores import AGENT, text


def conversation(path: Path) -> None:
    with QueueStore.open(path) as store:
        store.create_conversation("c", agent=AGENT, cwd="/", now=1.0)
        store.add_message("c", text("first"), now=2.0)


def test_a_store_opened_read_only_reads_and_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    conversation(path)
    before = path.read_bytes()
    with QueueStore.open(path, read_only=True) as store:
        assert [m.seq for m in store.messages("c")] == [1]
        with pytest.raises(QueueStoreError, match="opened read-only; cannot add a message"):
            store.add_message("c", text("second"), now=3.0)
        with pytest.raises(QueueStoreError, match="opened read-only"), store.batch():
            pass
        assert not store.commit_now_if_free(lambda: True)
    assert path.read_bytes() == before


def test_reading_a_missing_store_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    with pytest.raises(QueueStoreError, match="No such file"):
        QueueStore.open(path, read_only=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("swap", ["removed", "replaced", "moved away"])
def test_a_commit_after_the_store_left_its_path_is_refused_and_rolled_back(
    tmp_path: Path, swap: str
) -> None:
    path = tmp_path / "queue.sqlite3"
    conversation(path)
    with QueueStore.open(path) as store:
        if swap == "removed":
            path.unlink()
        elif swap == "replaced":
            shutil.copyfile(path, tmp_path / "copy")
            os.replace(tmp_path / "copy", path)
        else:
            path.rename(tmp_path / "elsewhere.sqlite3")
        with pytest.raises(StoreReplacedError, match="could not add a message to 'c'"):
            store.add_message("c", text("second"), now=3.0)
        # the commit that never waits declines, and the slow way says why
        assert not store.commit_now_if_free(
            lambda: store.add_message("c", text("third"), now=4.0) is not None
        )
        with pytest.raises(StoreReplacedError), store.batch():
            store.add_message("c", text("fourth"), now=5.0)
        assert [m.seq for m in store.messages("c")] == [1]  # nothing kept, even in its file


def test_the_store_file_is_the_one_named_after_a_chdir(tmp_path: Path) -> None:
    conversation(tmp_path / "queue.sqlite3")
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        with QueueStore.open("queue.sqlite3") as store:
            os.chdir(here)  # the relative name now means another file, or none
            store.add_message("c", text("second"), now=3.0)
    finally:
        os.chdir(here)
