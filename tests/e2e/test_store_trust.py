"""A store no other user can subvert (issue 21, items 1-4), through the real ``acp-bridge``.

Each was reproduced before the fix:

1. In a directory another user can write, they pre-created ``store.db.locks/`` (0777) and put a
   symbolic link to one of your files in place of a conversation's ``.lock``: your next
   ``run --conversation ID`` truncated that file and set it to 0600. A store file they
   pre-created (0666) received your prompts. A ``--store`` that is a dangling symbolic link
   created the store, 0644, through the link.
2. A foreign SQLite database given as ``--store`` was switched to WAL (and more) before it was
   refused, even by ``conversations``.
3. ``conversations`` and ``show`` could not read a store they may read but not write.
4. A store removed or replaced under a live ``run`` went unnoticed: the run finished "done"
   into an unlinked file.

"Another user" is uid 65534 (nobody): the tests run as root (here and in CI), chown files to it
and make directories 0777. Root writes whatever the mode bits say, so the read-only cases run
acp-bridge without ``CAP_DAC_OVERRIDE`` (dropped from the bounding set before exec), as a user
who may read but not write.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO

import pytest

from tests.e2e.test_run_owner import next_event

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
OTHER_UID = 65534  # nobody
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI-not-a-real-key you@host\n"

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="making another user's files needs root (as here and in CI)"
)


def bridge(
    *args: str, preexec_fn: Callable[[], None] | None = None, umask: int = -1
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=60,
        preexec_fn=preexec_fn,
        umask=umask,
    )


def run(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return bridge("run", "--store", str(store), *args, "--", *ECHO)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refusal (exit 2)."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def first_conversation(store: Path) -> str:
    """A conversation of one done message, made by a real run; its id."""
    made = run(store, "--json", "-m", "echo hi")
    assert made.returncode == 0, made.stderr
    return str(next_event(iter(made.stdout.splitlines()), "session")["conversation"])


def shared_directory(tmp_path: Path) -> Path:
    """A directory everybody may write, sticky like /tmp (only an entry's owner may remove it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def victim(tmp_path: Path) -> Path:
    """One of your files that a planted link points at (standing for ~/.ssh/authorized_keys)."""
    keys = tmp_path / "authorized_keys"
    keys.write_text(KEY)
    keys.chmod(0o644)
    return keys


def assert_untouched(keys: Path) -> None:
    assert keys.read_text() == KEY
    assert stat.S_IMODE(keys.stat().st_mode) == 0o644


def as_other_user(path: Path, mode: int) -> None:
    os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)
    if not path.is_symlink():
        path.chmod(mode)


# -- 1. lock files, locks directories and store files that are not yours -------------------------


@needs_root
def test_a_locks_directory_another_user_made_is_refused_and_the_file_it_links_to_untouched(
    tmp_path: Path,
) -> None:
    store = shared_directory(tmp_path) / "store.db"
    conversation = first_conversation(store)
    keys = victim(tmp_path)
    locks = store.parent / "store.db.locks"
    shutil.rmtree(locks)  # as if the other user had been first
    locks.mkdir()
    (locks / f"{conversation}.lock").symlink_to(keys)
    as_other_user(locks / f"{conversation}.lock", 0o777)
    as_other_user(locks, 0o777)

    refused = run(store, "--conversation", conversation, "-m", "echo again")

    line = one_line(refused)
    assert str(locks) in line and "owned by uid 65534" in line, line
    assert_untouched(keys)


@pytest.mark.parametrize("planted", ["symlink", "hard link", "other user's file"])
@needs_root
def test_a_lock_file_that_is_not_a_private_file_of_yours_is_refused_and_left_alone(
    tmp_path: Path, planted: str
) -> None:
    store = tmp_path / "store.db"
    conversation = first_conversation(store)
    keys = victim(tmp_path)
    lock = store.parent / "store.db.locks" / f"{conversation}.lock"
    lock.unlink()
    if planted == "symlink":
        lock.symlink_to(keys)
        reason = "symbolic link"
    elif planted == "hard link":
        os.link(keys, lock)
        reason = "2 hard links"
    else:
        lock.write_text("")
        as_other_user(lock, 0o666)
        reason = "owned by uid 65534"

    refused = run(store, "--conversation", conversation, "-m", "echo again")

    line = one_line(refused)
    assert str(lock) in line and reason in line, line
    assert_untouched(keys)
    with closing(sqlite3.connect(store)) as conn:  # nothing was prompted
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1


@needs_root
def test_a_store_file_another_user_made_gets_no_prompt(tmp_path: Path) -> None:
    store = shared_directory(tmp_path) / "store.db"
    store.write_bytes(b"")
    as_other_user(store, 0o666)

    refused = run(store, "-m", "echo my secret prompt")

    line = one_line(refused)
    assert str(store) in line and "owned by uid 65534" in line, line
    assert store.read_bytes() == b""
    assert sorted(p.name for p in store.parent.iterdir()) == ["store.db"]


@needs_root
def test_a_store_another_user_can_write_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    first_conversation(store)
    store.chmod(0o666)

    line = one_line(run(store, "-m", "echo hi"))

    assert str(store) in line and "another user can write it (mode 0666)" in line, line


@needs_root
def test_a_wal_file_another_user_planted_beside_the_store_is_refused(tmp_path: Path) -> None:
    store = shared_directory(tmp_path) / "store.db"
    first_conversation(store)
    wal = store.parent / "store.db-wal"
    wal.write_bytes(b"")
    as_other_user(wal, 0o666)

    line = one_line(run(store, "-m", "echo hi"))

    assert str(wal) in line and "owned by uid 65534" in line, line


def test_a_dangling_symlink_given_as_the_store_is_refused_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere" / "planted.db"
    target.parent.mkdir()
    store = tmp_path / "store.db"
    store.symlink_to(target)

    line = one_line(run(store, "-m", "echo hi"))

    assert str(store) in line and "symbolic link" in line, line
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_a_store_in_a_directory_where_others_can_swap_files_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # not sticky: anyone may rename or remove your files there

    line = one_line(run(open_dir / "store.db", "-m", "echo hi"))

    assert str(open_dir) in line and "not sticky" in line, line
    assert list(open_dir.iterdir()) == []


def test_new_store_files_and_lock_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    store = tmp_path / "state" / "store.db"
    made = bridge(
        "run", "--store", str(store), "--json", "-m", "echo hi", "--", *ECHO, umask=0
    )
    assert made.returncode == 0, made.stderr
    conversation = next_event(iter(made.stdout.splitlines()), "session")["conversation"]

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(store) == 0o600
    assert mode(store.parent / "store.db.locks") == 0o700
    assert mode(store.parent / "store.db.locks" / f"{conversation}.lock") == 0o600


# -- 2. a foreign SQLite database is refused before anything in it changes -----------------------


@pytest.fixture(params=["tables, no application id", "another application id"])
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "notes.db"
    with closing(sqlite3.connect(path)) as conn:
        if request.param == "another application id":
            conn.execute("PRAGMA application_id = 42")
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
        conn.commit()
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["conversations"],
        ["conversations", "--json"],
        ["show", "anything"],
        ["prune", "--keep", "0"],
        ["run", "-m", "echo hi", "--", *ECHO],
    ],
    ids=lambda command: command[0] + (" --json" if "--json" in command else ""),
)
def test_a_foreign_sqlite_database_is_refused_byte_for_byte_unchanged(
    foreign: Path, command: list[str]
) -> None:
    before = digest(foreign)

    refused = bridge(command[0], "--store", str(foreign), *command[1:])

    line = one_line(refused)
    assert str(foreign) in line and "not an acp-bridge queue store" in line, line
    assert digest(foreign) == before
    with closing(sqlite3.connect(foreign)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


# -- 3. a store you may read but not write can be read --------------------------------------------


def _drop_dac_override() -> None:
    """In the child before exec: root then obeys mode bits (CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH leave the bounding set, so the exec'd program never gets them)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(99)


READER = _drop_dac_override if os.geteuid() == 0 else None


def read_only_bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return bridge(*args, preexec_fn=READER)


@contextmanager
def writable_again(*paths: Path) -> Iterator[None]:
    try:
        yield
    finally:
        for path in paths:  # so that pytest can clean up
            path.chmod(0o700)


def test_a_store_in_a_directory_you_may_not_write_is_listed_and_shown(tmp_path: Path) -> None:
    directory = tmp_path / "archive"
    directory.mkdir()
    store = directory / "store.db"
    conversation = first_conversation(store)
    directory.chmod(0o500)
    with writable_again(directory):
        listed = read_only_bridge("conversations", "--json", "--store", str(store))
        shown = read_only_bridge("show", "--store", str(store), conversation[:8])
        still = sorted(p.name for p in directory.iterdir())

    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [conversation]
    assert shown.returncode == 0, shown.stderr
    assert "> echo hi" in shown.stdout and "#1 done (end_turn)" in shown.stdout
    assert still == ["store.db", "store.db.locks"]


V2_STORE = """
PRAGMA application_id = 1094930498;
CREATE TABLE conversations (id TEXT PRIMARY KEY, created_at REAL NOT NULL,
  updated_at REAL NOT NULL, agent TEXT NOT NULL, cwd TEXT NOT NULL, session_id TEXT,
  mcp_servers TEXT NOT NULL DEFAULT '[]', additional_directories TEXT NOT NULL DEFAULT '[]',
  config TEXT NOT NULL DEFAULT '{}', paused INTEGER NOT NULL DEFAULT 0, title TEXT);
CREATE TABLE messages (conversation_id TEXT NOT NULL, seq INTEGER NOT NULL,
  content TEXT NOT NULL, state TEXT NOT NULL, stop_reason TEXT, error TEXT, recoverable INTEGER,
  created_at REAL NOT NULL, started_at REAL, finished_at REAL,
  position INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (conversation_id, seq));
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL,
  ts REAL NOT NULL, seq INTEGER, kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE UNIQUE INDEX messages_queue ON messages (conversation_id, position)
  WHERE state = 'queued';
INSERT INTO conversations (id, created_at, updated_at, agent, cwd)
  VALUES ('archived', 1, 2, '{"argv": ["old-agent"]}', '/');
INSERT INTO messages VALUES ('archived', 1, '[{"type": "text", "text": "hello"}]', 'done',
  'end_turn', NULL, NULL, 1, 1.5, 2, 1, 1);
PRAGMA user_version = 2;
"""


def test_a_read_only_store_of_an_older_schema_is_read_and_left_as_it_is(tmp_path: Path) -> None:
    store = tmp_path / "old.db"
    with closing(sqlite3.connect(store)) as conn:
        conn.executescript(V2_STORE)
    store.chmod(0o400)
    before = digest(store)

    listed = read_only_bridge("conversations", "--json", "--store", str(store))
    shown = read_only_bridge("show", "--store", str(store), "archived")

    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["messages"] == {"done": 1}
    assert shown.returncode == 0, shown.stderr
    assert "> hello" in shown.stdout and "(no reply recorded)" in shown.stdout
    assert digest(store) == before
    with closing(sqlite3.connect(store)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2


# -- 4. the store removed or replaced under a live run --------------------------------------------


@contextmanager
def live_run(store: Path) -> Iterator[tuple[subprocess.Popen[str], IO[str], IO[str]]]:
    """``run --json`` fed by a pipe: its first message has ended ``done``; yields the process
    and its stdin and stdout."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--json", "--store", str(store), "--", *ECHO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ENV,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write("echo first\n")
        proc.stdin.flush()
        ended = next_event(proc.stdout, "turn_ended")
        assert ended["state"] == "done", ended
        yield proc, proc.stdin, proc.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


def remove(store: Path) -> None:
    store.unlink()


def replace(store: Path) -> None:
    copy = store.with_name("copy.db")
    shutil.copyfile(store, copy)  # the same bytes, another file
    os.replace(copy, store)


@pytest.mark.parametrize("swap", [remove, replace], ids=["removed", "replaced"])
def test_a_store_removed_or_replaced_under_a_live_run_stops_it_and_nothing_more_is_done(
    tmp_path: Path, swap: Callable[[Path], None]
) -> None:
    store = tmp_path / "store.db"
    with live_run(store) as (proc, stdin, stdout):
        swap(store)
        stdin.write("echo second\n")
        stdin.close()
        rest = [json.loads(line) for line in stdout]
        code = proc.wait(timeout=60)
        assert proc.stderr is not None
        stderr = proc.stderr.read()

    assert code == 4, stderr
    assert not [e for e in rest if e["event"] in ("turn_started", "turn_ended")], rest
    (line,) = stderr.strip().splitlines()
    assert f"the queue store {store} was removed or replaced" in line, line
