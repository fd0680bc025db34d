"""``acp-bridge conversations``, ``show`` and ``prune`` through the real process, on stores that
``acp-bridge run`` wrote (and one an older acp-bridge wrote)."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from acp_bridge.cli.owner import lock_path
from acp_bridge.conversation.schema import LATEST_VERSION
from acp_bridge.conversation.store import QueueStore

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]


def bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=60,
    )


def stored(store: Path, *texts: str, name: str | None = None) -> str:
    """A conversation with these messages queued, written in-process (prune and lookups need no
    agent); its id (``name``, else a random one)."""
    with QueueStore.open(store) as opened:
        record = opened.create_conversation(
            name, agent={"argv": ECHO}, cwd=str(ROOT), now=time.time()
        )
        for text in texts:
            opened.add_message(record.id, [{"type": "text", "text": text}], now=time.time())
        return record.id


def ids(store: Path) -> list[str]:
    with QueueStore.open(store) as opened:
        return [record.id for record in opened.list_conversations()]


def lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_run_then_conversations_and_show_give_the_transcript_and_the_usage(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.db"
    first_message = "usage 10 100 0.25; tokens 3 4; echo hi there"
    result = bridge(
        "run", "--json", "--store", str(store), "-m", first_message,
        "-m", "echo second; error", "--", *ECHO,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    ended = next(e for e in lines(result.stdout) if e["event"] == "turn_ended")
    assert ended["usage"]["tokens"] == {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}
    assert "acp-bridge: usage: tokens 3 in, 4 out, 7 total; cost 0.2500 USD" in result.stderr
    conversation = next(e for e in lines(result.stdout) if e["event"] == "session")["conversation"]

    listed = bridge("conversations", "--json", "--store", str(store))
    assert listed.returncode == 0, listed.stderr
    (entry,) = lines(listed.stdout)
    assert entry["id"] == conversation and entry["cwd"] == str(ROOT)
    assert entry["messages"] == {"done": 1, "failed": 1}
    assert entry["agent"] == ECHO
    assert entry["usage"]["cost"] == {"USD": 0.25}

    table = bridge("conversations", "--store", str(store))
    assert table.returncode == 0, table.stderr
    assert conversation in table.stdout and "1 done, 1 failed" in table.stdout

    shown = bridge("show", "--json", "--store", str(store), conversation[:8])
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    first, second = document["messages"]
    assert (first["state"], first["stopReason"], first["reply"]) == ("done", "end_turn", "hi there")
    assert first["usage"]["context"] == {"used": 10, "size": 100}
    assert second["state"] == "failed" and second["reply"] == "second"

    text = bridge("show", "--store", str(store), conversation)
    assert text.returncode == 0, text.stderr
    assert "#1 done (end_turn)" in text.stdout and "> usage 10 100 0.25" in text.stdout
    assert "\nhi there\n" in text.stdout and "#2 failed, " in text.stdout
    assert "(recoverable): fake agent error" in text.stdout  # the error last: it may be long


def test_unknown_and_ambiguous_ids_are_one_line_usage_errors(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    missing = bridge("show", "--store", str(store), "nope")
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "no store" in missing.stderr
    assert not store.exists()  # reading never creates a store
    stored(store, "a", name="abc1")
    stored(store, "b", name="abc2")
    unknown = bridge("show", "--store", str(store), "nope")
    assert unknown.returncode == 2
    assert unknown.stderr.count("\n") == 1 and "no stored conversation 'nope'" in unknown.stderr
    ambiguous = bridge("show", "--store", str(store), "abc")
    assert ambiguous.returncode == 2 and ambiguous.stderr.count("\n") == 1
    assert "several conversations (abc1, abc2)" in ambiguous.stderr
    exact = bridge("show", "--json", "--store", str(store), "abc2")
    assert json.loads(exact.stdout)["id"] == "abc2"
    empty = bridge("conversations", "--store", str(tmp_path / "none.db"))
    assert empty.returncode == 0 and empty.stdout == ""


def test_prune_keeps_the_newest_skips_an_owned_one_and_dry_run_removes_nothing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.db"
    oldest, owned, newest = (stored(store, text) for text in ("a", "b", "c"))
    assert bridge("prune", "--store", str(store)).returncode == 2  # say what to remove

    dry = bridge("prune", "--dry-run", "--keep", "1", "--store", str(store))
    assert dry.returncode == 0, dry.stderr
    assert sorted(dry.stdout.split()) == sorted([oldest, owned])
    assert len(ids(store)) == 3
    assert not lock_path(store, oldest).parent.exists()  # a dry run creates no lock files

    lock = lock_path(store, owned)  # held as a running `acp-bridge run` holds it
    lock.parent.mkdir(mode=0o700, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(f"{os.getpid()}\n")
        held.flush()
        pruned = bridge("prune", "--keep", "1", "--store", str(store))
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.split() == [oldest]
    assert f"conversation {owned} is in use by process {os.getpid()}" in pruned.stderr
    assert ids(store) == [newest, owned]
    assert not lock_path(store, oldest).exists()
    with closing(sqlite3.connect(store)) as conn:  # its messages and events went with it
        for table in ("messages", "events"):
            query = f"SELECT COUNT(*) FROM {table} WHERE conversation_id = ?"
            assert conn.execute(query, (oldest,)).fetchone()[0] == 0

    assert bridge("prune", "--older-than", "1h", "--store", str(store)).stdout == ""
    with closing(sqlite3.connect(store)) as conn, conn:  # last active 10 s ago, not now
        conn.execute("UPDATE conversations SET updated_at = updated_at - 10")
    everything = bridge("prune", "--older-than", "0s", "--store", str(store))
    assert sorted(everything.stdout.split()) == sorted([newest, owned])


V2_SCHEMA = """
PRAGMA application_id = 1094930498;
CREATE TABLE conversations (id TEXT PRIMARY KEY, created_at REAL NOT NULL,
  updated_at REAL NOT NULL, agent TEXT NOT NULL, cwd TEXT NOT NULL, session_id TEXT,
  mcp_servers TEXT NOT NULL DEFAULT '[]', additional_directories TEXT NOT NULL DEFAULT '[]',
  config TEXT NOT NULL DEFAULT '{}', paused INTEGER NOT NULL DEFAULT 0, title TEXT);
CREATE INDEX conversations_by_update ON conversations (updated_at);
CREATE TABLE messages (conversation_id TEXT NOT NULL REFERENCES conversations (id)
  ON DELETE CASCADE, seq INTEGER NOT NULL, content TEXT NOT NULL, state TEXT NOT NULL,
  stop_reason TEXT, error TEXT, recoverable INTEGER, created_at REAL NOT NULL,
  started_at REAL, finished_at REAL, position INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (conversation_id, seq));
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL
  REFERENCES conversations (id) ON DELETE CASCADE, ts REAL NOT NULL, seq INTEGER,
  kind TEXT NOT NULL, data TEXT NOT NULL,
  FOREIGN KEY (conversation_id, seq) REFERENCES messages (conversation_id, seq));
CREATE UNIQUE INDEX messages_queue ON messages (conversation_id, position)
  WHERE state = 'queued';
CREATE UNIQUE INDEX messages_running ON messages (conversation_id) WHERE state = 'running';
CREATE INDEX messages_by_position ON messages (conversation_id, position);
INSERT INTO conversations (id, created_at, updated_at, agent, cwd, session_id)
  VALUES ('old', 1, 2, '{"argv": ["old-agent"]}', 'CWD', 'sess_old');
INSERT INTO messages VALUES ('old', 1, '[{"type": "text", "text": "hello"}]', 'done',
  'end_turn', NULL, NULL, 1, 1.5, 2, 1, 1);
PRAGMA user_version = 2;
"""


def test_a_store_written_by_the_previous_schema_is_read_as_it_is_and_upgraded_by_run(
    tmp_path: Path,
) -> None:
    store = tmp_path / "old.db"
    with closing(sqlite3.connect(store)) as conn:
        conn.executescript(V2_SCHEMA.replace("CWD", str(tmp_path)))
    listed = bridge("conversations", "--json", "--store", str(store))
    assert listed.returncode == 0, listed.stderr
    (entry,) = lines(listed.stdout)
    assert (entry["id"], entry["messages"], entry["usage"]) == ("old", {"done": 1}, {})
    shown = bridge("show", "--store", str(store), "old")
    assert shown.returncode == 0, shown.stderr
    assert "#1 done (end_turn)" in shown.stdout and "> hello" in shown.stdout
    assert "(no reply recorded)" in shown.stdout
    with closing(sqlite3.connect(store)) as conn:  # reading never writes (issue 21)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    # and run upgrades it and goes on with it: a new message gets its reply stored
    cont = bridge("run", "--store", str(store), "--conversation", "old", "-m", "echo later",
                  "--cwd", str(tmp_path), "--", *ECHO)  # fmt: skip
    assert cont.returncode == 0, cont.stderr
    with closing(sqlite3.connect(store)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION
    document = json.loads(bridge("show", "--json", "--store", str(store), "old").stdout)
    assert [m["reply"] for m in document["messages"]] == [None, "later"]


def test_the_default_store_is_the_one_run_uses(tmp_path: Path, monkeypatch: Any) -> None:
    import argparse

    from acp_bridge.cli import conversations_cmd, store_open

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("ACP_BRIDGE_STORE", raising=False)
    # Both find the store through cli/store_open.py (run: claim_conversation's store_spec).
    listed = conversations_cmd._store_path(argparse.Namespace(store=None))
    assert listed == Path(store_open.store_spec(None)) == tmp_path / "acp-bridge" / "store.db"


def test_a_bridge_killed_mid_turn_loses_no_cost_and_counts_nothing_twice(tmp_path: Path) -> None:
    store, history = str(tmp_path / "s.db"), str(tmp_path / "history.json")
    agent = [*ECHO, "--history", history]  # the session outlives each agent: load works
    spend = "usage 10 100 0.5; tokens 1 1; echo a"
    first = bridge("run", "--store", store, "-m", spend, "--", *agent)
    assert first.returncode == 0, first.stderr
    killed = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--json", "--resume", "--store", store,
         "-m", "usage 20 100 0.7; wait", "--", *agent],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    assert killed.stdout is not None
    for line in killed.stdout:  # the agent reported the cumulative 0.7 to the bridge: kill it
        event = json.loads(line)
        if event["event"] == "update" and event["update"]["sessionUpdate"] == "usage_update":
            killed.kill()
            break
    killed.wait(timeout=30)
    killed.stdout.close()
    spend = "usage 30 100 0.9; echo c"
    last = bridge("run", "--resume", "--store", store, "-m", spend, "--", *agent)
    assert last.returncode == 4, last.stderr  # it answers for the message the kill cut
    conversation = json.loads(bridge("conversations", "--json", "--store", store).stdout)["id"]
    document = json.loads(bridge("show", "--json", "--store", store, conversation).stdout)
    assert [m["state"] for m in document["messages"]] == ["done", "failed", "done"]
    costs = [m["usage"].get("cost") for m in document["messages"]]
    # The killed turn's growth was never stored with its message; the next snapshot is measured
    # from the last stored baseline (0.5), so the conversation still totals 0.9, once.
    assert costs == [{"USD": 0.5}, None, {"USD": 0.4}]
    assert document["usage"]["cost"] == {"USD": 0.9}
    assert document["usage"]["tokens"]["totalTokens"] == 2
