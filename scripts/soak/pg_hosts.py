"""The shared-store soak (issue 23): several ``acp-bridge serve`` hosts on one PostgreSQL
database, messages committed to random conversations while hosts are killed with ``kill -9``
and started again at random. At the end it checks:

- every message is in exactly one final state (done, failed, cancelled, superseded);
- none was prompted twice: the fixture agent (``tests/pg/gate_agent.py``) logs every prompt it
  receives, and each message's text is unique; a ``done`` message was prompted exactly once;
- FIFO per conversation: each conversation's prompts reached its agents in seq order;
- no lease is left held once the hosts stopped (no advisory lock in ``pg_locks``).

Messages are committed through the store (``PgStore.add_message``: what ``acp-bridge send``
does where no owner answers), from this process, and every host is notified.

    python -m scripts.soak.pg_hosts --store postgresql://... [--hosts 3] [--conversations 30]
        [--messages 3000] [--kills 20] [--seed N]

Without ``--store`` it starts a private PostgreSQL server (``tests/pg_server.py``). Exit 0
when every check holds, 1 otherwise (the report, JSON, on stdout either way).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg

from acp_bridge.pgstore.notify import EVENTS_CHANNEL
from acp_bridge.pgstore.store import PgStore

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "pg" / "gate_agent.py"
FINAL = frozenset({"done", "failed", "cancelled", "superseded"})


class Hosts:
    """The ``serve`` processes, each on a socket of its own in ``workdir``."""

    def __init__(self, url: str, workdir: Path, count: int) -> None:
        self.url = url
        self.workdir = workdir
        self.processes: list[tuple[subprocess.Popen[bytes], threading.Thread] | None]
        self.processes = [None] * count
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }

    def start(self, index: int) -> None:
        """Start host ``index``; return once it serves (its first stderr line). A thread
        copies the rest of its stderr into ``host<index>.log`` (a full pipe would stop it)."""
        socket_dir = self.workdir / f"h{index}"
        process = subprocess.Popen(
            [sys.executable, "-m", "acp_bridge", "serve", "--store", self.url,
             "--socket", str(socket_dir / "host.sock"), "--", sys.executable, str(AGENT)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=self.env, cwd=ROOT,
        )  # fmt: skip
        assert process.stderr is not None
        first = process.stderr.readline()
        if b"serving" not in first:
            process.kill()
            process.wait()
            raise RuntimeError(f"host {index} did not start: {first!r}")
        copier = threading.Thread(target=self._copy, args=(index, process), daemon=True)
        copier.start()
        self.processes[index] = (process, copier)

    def kill(self, index: int) -> None:
        """``kill -9`` host ``index``."""
        held = self.processes[index]
        if held is not None:
            held[0].kill()
            self._reap(held)
            self.processes[index] = None

    def stop_all(self) -> None:
        """SIGTERM every host and wait for each (SIGKILL after 60 s)."""
        for held in self.processes:
            if held is not None:
                held[0].send_signal(signal.SIGTERM)
        for index, held in enumerate(self.processes):
            if held is not None:
                self._reap(held)
                self.processes[index] = None

    def _reap(self, held: tuple[subprocess.Popen[bytes], threading.Thread]) -> None:
        process, copier = held
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        copier.join()

    def _copy(self, index: int, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        with open(self.workdir / f"host{index}.log", "ab") as log:
            for line in process.stderr:
                log.write(line)
                log.flush()
        process.stderr.close()


def soak(
    url: str, *, hosts: int, conversations: int, messages: int, kills: int, seed: int
) -> dict[str, Any]:
    """Run the soak against the (empty) database at ``url``; the report (``ok`` and the
    counts and violations of each check)."""
    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="acpb-soak-"))
    prompt_log = workdir / "prompts.log"
    texts: dict[tuple[str, int], str] = {}
    group = Hosts(url, workdir, hosts)
    store = PgStore.open(url)
    try:
        for index in range(hosts):
            group.start(index)
        argv = [sys.executable, str(AGENT), "--quiet", "--prompt-log", str(prompt_log)]
        ids = [
            store.create_conversation(agent={"argv": argv}, cwd=str(workdir), now=time.time()).id
            for _ in range(conversations)
        ]
        kill_at = set(rng.sample(range(1, messages), min(kills, messages - 1)))
        for number in range(messages):
            if number in kill_at:
                victim = rng.randrange(hosts)
                group.kill(victim)
                group.start(victim)
            conversation_id = rng.choice(ids)
            text = f"m{number}-{uuid.uuid4().hex[:6]}"
            stored = store.add_message(conversation_id, [{"type": "text", "text": text}],
                                       now=time.time())  # fmt: skip
            texts[(conversation_id, stored.seq)] = text
            time.sleep(rng.random() * 0.004)
        settled = _wait_all_final(url, store, ids, timeout_s=max(120.0, messages * 0.2))
        group.stop_all()
        report = _check(url, store, ids, texts, prompt_log, settled)
    finally:
        group.stop_all()
        store.close()
    if report["ok"]:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        report["workdir"] = str(workdir)  # the hosts' logs and the prompt log, kept
    return report


def _wait_all_final(url: str, store: PgStore, ids: list[str], *, timeout_s: float) -> bool:
    """Woken by the event log's notifications: True once every message is final."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {EVENTS_CHANNEL}")
        while True:
            if all(m.state.value in FINAL for cid in ids for m in store.messages(cid)):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([conn.fileno()], [], [], min(left, 1.0))
            for _ in conn.notifies(timeout=0):
                pass


def _check(
    url: str,
    store: PgStore,
    ids: list[str],
    texts: dict[tuple[str, int], str],
    prompt_log: Path,
    settled: bool,
) -> dict[str, Any]:
    violations: list[str] = []
    states: dict[str, int] = defaultdict(int)
    final: dict[str, str] = {}
    for cid in ids:
        for message in store.messages(cid):
            state = message.state.value
            states[state] += 1
            text = texts.get((cid, message.seq))
            if text is None:
                violations.append(f"{cid} seq {message.seq}: a message nobody sent")
                continue
            final[text] = state
            if state not in FINAL:
                violations.append(f"{cid} seq {message.seq}: left {state}")
    if len(final) != len(texts):
        violations.append(f"{len(texts) - len(final)} messages sent were not stored")
    prompted: dict[str, int] = defaultdict(int)
    order: dict[str, list[int]] = defaultdict(list)
    by_text = {text: key for key, text in texts.items()}
    lines = prompt_log.read_text().splitlines() if prompt_log.exists() else []
    for line in lines:
        _, _, text = line.partition(" ")
        prompted[text] += 1
        if text in by_text:
            cid, seq = by_text[text]
            order[cid].append(seq)
    for text, count in prompted.items():
        if count > 1:
            violations.append(f"{text!r} was prompted {count} times")
    for text, state in final.items():
        if state == "done" and prompted.get(text, 0) != 1:
            violations.append(f"{text!r} is done but was prompted {prompted.get(text, 0)} times")
    for cid, seqs in order.items():
        if seqs != sorted(seqs):
            violations.append(f"{cid}: prompted out of order: {seqs}")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
        held = 0 if row is None else int(row[0])
    held -= len(store.leases)  # this process holds none; counted for honesty
    if held:
        violations.append(f"{held} leases left held after the hosts stopped")
    if not settled:
        violations.append("not every message reached a final state in time")
    return {
        "ok": not violations,
        "messages": len(texts),
        "states": dict(states),
        "prompts": len(lines),
        "leases_held": held,
        "violations": violations[:50],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="an empty PostgreSQL database (default: a private server)")
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args(argv)
    server = None
    url = args.store
    if url is None:
        sys.path.insert(0, str(ROOT))
        from tests.pg_server import start_server

        server = start_server()
        url = server.url()
    try:
        report = soak(
            url,
            hosts=args.hosts,
            conversations=args.conversations,
            messages=args.messages,
            kills=args.kills,
            seed=args.seed,
        )
    finally:
        if server is not None:
            server.stop()
    print(json.dumps({"seed": args.seed, **report}, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
