"""The shared-store soak (issue 23): several ``acp-bridge serve`` hosts on one PostgreSQL
database, messages sent through random hosts while hosts are killed with ``kill -9`` and
started again at random.

**Sending.** Each message carries a unique token as its text. A few sender tasks (``--senders``)
each send one message at a time with ``_acp_bridge/send`` to a random live host's Unix socket
(:func:`~acp_bridge.host.client.connect_host`, as ``acp-bridge send`` does). A host that does
not own the conversation while another live host does answers ``ownedElsewhere``; the message
is then committed to the store here (``PgStore.add_message``, what ``send`` does then: the
owner is notified), and counted as a send to a non-owner host. A host nobody owns the
conversation of takes it.

**Kills.** At ``--kills`` points spread over the messages, a host is killed with ``kill -9``
(one with a send in flight when there is one, so that sends are cut), its database sessions
are waited out (``pg_stat_activity``: a ``COMMIT`` the server had received completes first),
and it is started again. A send that never reached a host (nothing listened) goes to another.
A send cut after its request was written is ambiguous: once that host is dead and its sessions
are gone, the token is looked up in the store: committed, it counts once; not, it is sent
again through another host. No token is sent again once committed.

**Checks**, once every message is final and the hosts stopped:

- every token is stored exactly once (in its conversation), and no message is unknown;
- every message is in exactly one final state (done, failed, cancelled, superseded);
- none was prompted twice: the fixture agent (``tests/pg/gate_agent.py``) logs every prompt it
  receives; a ``done`` message was prompted exactly once;
- FIFO per conversation: each conversation's prompts reached its agents in seq order;
- no lease is left held once the hosts stopped (no advisory lock in ``pg_locks``).

Stranded conversations (unfinished messages nobody owns, once every host is up for good: a
known issue, see :func:`_wait_all_final`) are asked for once and listed in the report
(``stranded_then_asked``), not counted as violations.

    python -m scripts.soak.pg_hosts --store postgresql://... [--hosts 3] [--conversations 30]
        [--messages 3000] [--kills 20] [--senders 4] [--seed N]

Without ``--store`` it starts a private PostgreSQL server (``tests/pg_server.py``). Progress on
stderr. Exit 0 when every check holds, 1 otherwise (the report, JSON, on stdout either way).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import psycopg
from anyio.streams.memory import MemoryObjectReceiveStream

from acp_bridge.errors import BridgeError
from acp_bridge.host.client import (
    Endpoint,
    HostClientError,
    HostRequestError,
    connect_host,
    text_content,
)
from acp_bridge.pgstore.notify import EVENTS_CHANNEL, QUEUE_CHANNEL
from acp_bridge.pgstore.store import PgStore

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "pg" / "gate_agent.py"
FINAL = frozenset({"done", "failed", "cancelled", "superseded"})
SESSIONS_GONE_TIMEOUT_S = 30.0
"""How long a killed host's database sessions may take to end (the server notices the closed
socket at once; a transaction it was committing completes first)."""

STRANDED_AFTER_S = 5.0
"""How long a conversation with unfinished messages may go unowned, once every host is up for
good, before it is counted stranded (see :func:`_wait_all_final`)."""

Outcome = Literal["owner", "elsewhere", "unsent", "cut", "refused"]


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(eq=False)
class Instance:
    """One started ``serve`` process (a host index is started again as a new instance)."""

    index: int
    process: subprocess.Popen[bytes]
    copier: threading.Thread
    socket: Path
    dead: anyio.Event
    """Set once the process is reaped and its database sessions are gone."""
    in_flight: int = 0
    """Sends whose request went out to this instance and are not answered yet."""
    killing: bool = False


class Hosts:
    """The ``serve`` processes, each on a socket of its own in ``workdir``."""

    def __init__(self, url: str, workdir: Path, count: int) -> None:
        self.url = url
        self.workdir = workdir
        self.count = count
        self.up: dict[int, Instance] = {}
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }

    async def start(self, index: int) -> Instance:
        """Start host ``index``; return once it serves (its first stderr line)."""
        process, copier, socket_path = await anyio.to_thread.run_sync(self._start, index)
        return Instance(index, process, copier, socket_path, anyio.Event())

    def _start(self, index: int) -> tuple[subprocess.Popen[bytes], threading.Thread, Path]:
        """Start host ``index`` (blocking, in a worker thread). A thread copies the rest of
        its stderr into ``host<index>.log`` (a full pipe would stop it)."""
        socket_path = self.workdir / f"h{index}" / "host.sock"
        process = subprocess.Popen(
            [sys.executable, "-m", "acp_bridge", "serve", "--store", self.url,
             "--socket", str(socket_path), "--", sys.executable, str(AGENT)],
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
        return process, copier, socket_path

    def kill_now(self, instance: Instance) -> None:
        """``kill -9`` the instance, reap it, and wait until the server ended its sessions
        (blocking). Its ``dead`` event is the caller's to set (on the event loop)."""
        instance.process.kill()
        self._reap(instance)
        _wait_sessions_gone(self.url, instance.process.pid)

    def stop_all(self) -> None:
        """SIGTERM every host that is up and wait for each (SIGKILL after 60 s). Blocking."""
        instances = list(self.up.values())
        self.up.clear()
        for instance in instances:
            instance.process.send_signal(signal.SIGTERM)
        for instance in instances:
            self._reap(instance)

    def _reap(self, instance: Instance) -> None:
        try:
            instance.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            instance.process.kill()
            instance.process.wait()
        instance.copier.join()

    def _copy(self, index: int, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        with open(self.workdir / f"host{index}.log", "ab") as log:
            for line in process.stderr:
                log.write(line)
                log.flush()
        process.stderr.close()


def _wait_sessions_gone(url: str, pid: int) -> None:
    """Until no database session of the host process ``pid`` is left: its sessions'
    ``application_name`` is ``acp-bridge:<hostname>:<pid>:<random>`` (``pgstore.host_tag``).
    Polled: the server says nothing when a backend ends."""
    deadline = time.monotonic() + SESSIONS_GONE_TIMEOUT_S
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                (f"acp-bridge:%:{pid}:%",),
            ).fetchone()
            if row is None or int(row[0]) == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the killed host {pid}'s sessions did not end")
            time.sleep(0.01)


@dataclass
class Tally:
    """What the senders and the killer did."""

    through_owner: int = 0
    """Answered by the host (it owned the conversation, or took it)."""
    to_non_owner: int = 0
    """Answered ``ownedElsewhere`` by the host, then committed to the store here."""
    unsent: int = 0
    """Attempts that reached no host (it was down): sent again elsewhere."""
    cut: int = 0
    """Sends cut by a kill after the request went out (ambiguous)."""
    cut_committed: int = 0
    """... of which the token was found committed (counted once, not sent again)."""
    cut_resent: int = 0
    """... of which the token was not in the store: sent again through another host."""
    refused: list[str] = field(default_factory=list)
    """Other error answers (looked up like a cut send; a violation)."""
    kills: int = 0
    killed_in_flight: int = 0
    """Kills of a host that had a send in flight at that moment."""


class Soak:
    """The sending and killing of one soak run (on the event loop; blocking work in threads)."""

    def __init__(
        self, url: str, hosts: Hosts, store: PgStore, ids: list[str], rng: random.Random
    ) -> None:
        self.url = url
        self.hosts = hosts
        self.store = store
        self.ids = ids
        self.rng = rng
        self.tally = Tally()
        self.sent: dict[str, str] = {}
        """token -> the conversation it was sent to."""
        self.store_lock: anyio.Lock  # made in run(), on the event loop

    async def run(self, messages: int, kills: int, senders: int) -> None:
        self.store_lock = anyio.Lock()  # one PgStore session, used by one thread at a time
        async with anyio.create_task_group() as starting:
            for index in range(self.hosts.count):
                starting.start_soon(self._start, index)
        kill_at = set(self.rng.sample(range(1, messages), min(kills, max(messages - 1, 0))))
        work_in, work_out = anyio.create_memory_object_stream[int](0)
        # Buffered: sending goes on while a killed host starts again (a kill asked meanwhile
        # waits for it: one host is down at a time).
        kill_in, kill_out = anyio.create_memory_object_stream[None](max(kills, 1))
        async with anyio.create_task_group() as tg:
            for _ in range(senders):
                tg.start_soon(self._sender, work_out.clone())
            work_out.close()
            tg.start_soon(self._killer, kill_out)
            async with work_in, kill_in:
                for number in range(messages):
                    if number in kill_at:
                        await kill_in.send(None)
                    await work_in.send(number)
                    if number and number % 500 == 0:
                        progress(f"  {number} messages handed to the senders")

    async def _start(self, index: int) -> None:
        self.hosts.up[index] = await self.hosts.start(index)

    async def _sender(self, work: MemoryObjectReceiveStream[int]) -> None:
        async with work:
            async for number in work:
                token = f"m{number}-{uuid.uuid4().hex[:8]}"
                conversation_id = self.rng.choice(self.ids)
                self.sent[token] = conversation_id
                await self._deliver(token, conversation_id)

    async def _deliver(self, token: str, conversation_id: str) -> None:
        """Send ``token`` until it is committed exactly once."""
        avoid: set[int] = set()
        while True:
            choices = [i for i in self.hosts.up.values() if i.index not in avoid]
            if not choices:
                avoid.clear()
                await anyio.sleep(0.01)  # every host just failed us: one is restarting
                continue
            instance = self.rng.choice(choices)
            outcome = await self._send_once(instance, token, conversation_id)
            if outcome == "owner":
                self.tally.through_owner += 1
                return
            if outcome == "elsewhere":
                self.tally.to_non_owner += 1
                return
            avoid.add(instance.index)
            if outcome == "unsent":
                self.tally.unsent += 1
                continue
            if outcome == "cut":
                self.tally.cut += 1
                await self._until_dead(instance)
            if await anyio.to_thread.run_sync(_committed, self.url, token):
                if outcome == "cut":
                    self.tally.cut_committed += 1
                return
            if outcome == "cut":
                self.tally.cut_resent += 1

    async def _send_once(self, instance: Instance, token: str, conversation_id: str) -> Outcome:
        asked = False
        try:
            async with connect_host(
                Endpoint(socket=instance.socket),
                client_name="pg-soak",
                connect_timeout_s=30,
                request_timeout_s=60,
            ) as client:
                asked = True
                instance.in_flight += 1
                try:
                    await client.send(conversation_id, text_content(token))
                finally:
                    instance.in_flight -= 1
            return "owner"
        except HostRequestError as exc:
            data = exc.data.get("acpBridge") if isinstance(exc.data, dict) else None
            if not (isinstance(data, dict) and data.get("ownedElsewhere") is True):
                self.tally.refused.append(f"host {instance.index}: {exc}")
                return "refused"
        except (HostClientError, BridgeError, OSError, anyio.BrokenResourceError,
                anyio.ClosedResourceError, anyio.EndOfStream, ExceptionGroup):  # fmt: skip
            return "cut" if asked else "unsent"
        # Another live host owns it: committed to the store, as `acp-bridge send` does.
        async with self.store_lock:
            await anyio.to_thread.run_sync(self._commit, conversation_id, token)
        return "elsewhere"

    def _commit(self, conversation_id: str, token: str) -> None:
        self.store.add_message(conversation_id, text_content(token), unpause=True, now=time.time())

    async def _until_dead(self, instance: Instance) -> None:
        """Until the instance is dead and its sessions are gone. A send cut while nobody
        was killing it is killed here too (the lookup must not race a commit)."""
        if not instance.killing:
            self.tally.refused.append(f"host {instance.index}: a send was cut, no kill")
            await self._kill(instance)
            await self._start(instance.index)
        await instance.dead.wait()

    async def _kill(self, instance: Instance) -> None:
        instance.killing = True
        if self.hosts.up.get(instance.index) is instance:
            del self.hosts.up[instance.index]
        await anyio.to_thread.run_sync(self.hosts.kill_now, instance)
        instance.dead.set()

    async def _killer(self, requests: MemoryObjectReceiveStream[None]) -> None:
        async with requests:
            async for _ in requests:
                busy = [i for i in self.hosts.up.values() if i.in_flight]
                victim = self.rng.choice(busy or list(self.hosts.up.values()))
                self.tally.kills += 1
                self.tally.killed_in_flight += bool(victim.in_flight)
                await self._kill(victim)
                await self._start(victim.index)


def _committed(url: str, token: str) -> bool:
    """Whether a message with ``token`` is in the store."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM messages WHERE content LIKE %s", (f"%{token}%",)
        ).fetchone()
    return row is not None and int(row[0]) > 0


def soak(
    url: str,
    *,
    hosts: int,
    conversations: int,
    messages: int,
    kills: int,
    seed: int,
    senders: int = 4,
) -> dict[str, Any]:
    """Run the soak against the (empty) database at ``url``; the report (``ok``, the counts
    and the violations of each check)."""
    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="acpb-soak-"))
    prompt_log = workdir / "prompts.log"
    group = Hosts(url, workdir, hosts)
    store = PgStore.open(url)
    started = time.monotonic()
    try:
        argv = [sys.executable, str(AGENT), "--quiet", "--prompt-log", str(prompt_log)]
        ids = [
            store.create_conversation(agent={"argv": argv}, cwd=str(workdir), now=time.time()).id
            for _ in range(conversations)
        ]
        run = Soak(url, group, store, ids, rng)
        anyio.run(run.run, messages, kills, senders)
        sent_s = time.monotonic() - started
        progress(f"  all {messages} sent in {sent_s:.1f} s; waiting for every message to end")
        settled, stranded = _wait_all_final(url, store, ids, timeout_s=max(120.0, messages * 0.2))
        group.stop_all()
        report = _check(url, store, ids, run.sent, prompt_log, settled)
        report["stranded_then_asked"] = stranded
    finally:
        group.stop_all()
        store.close()
    tally = run.tally
    report["sends"] = {
        "through_owner": tally.through_owner,
        "to_non_owner_then_store": tally.to_non_owner,
        "reached_no_host": tally.unsent,
        "cut_by_kill": tally.cut,
        "cut_found_committed": tally.cut_committed,
        "cut_sent_again": tally.cut_resent,
    }
    report["kills"] = {"total": tally.kills, "with_a_send_in_flight": tally.killed_in_flight}
    if tally.refused:
        report["violations"].extend(tally.refused[:20])
        report["ok"] = False
    report["seconds"] = {"sending": round(sent_s, 1), "total": round(time.monotonic() - started, 1)}
    if report["ok"]:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        report["workdir"] = str(workdir)  # the hosts' logs and the prompt log, kept
    return report


def _wait_all_final(
    url: str, store: PgStore, ids: list[str], *, timeout_s: float
) -> tuple[bool, list[str]]:
    """Woken by the event log's notifications: whether every message became final in
    ``timeout_s``, and the conversations found stranded on the way.

    Stranded: unfinished messages and nobody holding the lease for ``STRANDED_AFTER_S``, after
    every host was started for the last time (so none will resume it). That happens when a
    message is committed while a dead owner's lease still looks held: the hosts notified
    refuse it and nobody asks again once the lease is free (the known issue of
    ``tests/pg/test_send_to_stale_owner.py``). Each is asked for once by a ``pg_notify`` on the
    queue channel, as a new ``send`` would, and reported; it is not a violation of the soak's
    checks."""
    deadline = time.monotonic() + timeout_s
    unowned_since: dict[str, float] = {}
    stranded: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {EVENTS_CHANNEL}")
        while True:
            now = time.monotonic()
            unfinished = [
                cid for cid in ids if any(m.state.value not in FINAL for m in store.messages(cid))
            ]
            if not unfinished:
                return True, stranded
            for cid in unfinished:
                if store.is_owned(cid):
                    unowned_since.pop(cid, None)
                elif now - unowned_since.setdefault(cid, now) >= STRANDED_AFTER_S:
                    stranded.append(cid)
                    del unowned_since[cid]
                    conn.execute("SELECT pg_notify(%s, %s)", (QUEUE_CHANNEL, cid))
            left = deadline - time.monotonic()
            if left <= 0:
                return False, stranded
            select.select([conn.fileno()], [], [], min(left, 1.0))
            for _ in conn.notifies(timeout=0):
                pass


def _token(content: Any) -> str | None:
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None


def _check(
    url: str,
    store: PgStore,
    ids: list[str],
    sent: dict[str, str],
    prompt_log: Path,
    settled: bool,
) -> dict[str, Any]:
    violations: list[str] = []
    states: dict[str, int] = defaultdict(int)
    final: dict[str, str] = {}
    by_text: dict[str, tuple[str, int]] = {}
    for cid in ids:
        for message in store.messages(cid):
            state = message.state.value
            states[state] += 1
            token = _token(message.content)
            if token is None or token not in sent:
                violations.append(f"{cid} seq {message.seq}: a message nobody sent")
                continue
            if token in by_text:
                violations.append(
                    f"{token!r} is stored twice: {by_text[token]}, {cid} {message.seq}"
                )
                continue
            if sent[token] != cid:
                violations.append(f"{token!r} stored in {cid}, sent to {sent[token]}")
            by_text[token] = (cid, message.seq)
            final[token] = state
            if state not in FINAL:
                violations.append(f"{cid} seq {message.seq}: left {state}")
    if len(final) != len(sent):
        violations.append(f"{len(sent) - len(final)} messages sent were not stored")
    prompted: dict[str, int] = defaultdict(int)
    order: dict[str, list[int]] = defaultdict(list)
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
        "messages": len(sent),
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
    parser.add_argument("--senders", type=int, default=4, help="sends in flight at once")
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
            senders=args.senders,
        )
    finally:
        if server is not None:
            server.stop()
    print(json.dumps({"seed": args.seed, **report}, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
