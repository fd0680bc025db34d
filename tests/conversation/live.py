"""Driving a conversation on a real fixture agent process, for the transcript and usage tests.

:func:`session` opens the store's one conversation (creating it the first time) on a fresh
supervised agent, so opening it again is a restart of the bridge: new agent process, the
session restored with ``session/load``, the store read back. The store is a SQLite file, or a
PostgreSQL database (``store_url``, the ``store_url`` fixture of conftest.py).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.records import StoredMessage
from acp_bridge.conversation.store import QueueStore
from acp_bridge.conversation.store_api import Store
from acp_bridge.core.turn_machine import TurnTimings
from acp_bridge.process.launcher import ShutdownTimeouts
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
OPTIONS = ClientOptions(
    restart=RestartPolicy(initial_delay_s=0.01, max_delay_s=0.05),
    shutdown=ShutdownTimeouts(stdin_close_grace_s=0.5, term_grace_s=0.5, kill_wait_s=5),
    cancel_grace_s=0.5,
)
POLICY = TurnPolicy(timings=TurnTimings(cancel_grace_s=0.5))


def agent(tmp_path: Path, script: str = "echo_agent.py", *flags: str) -> AgentSpec:
    """A fixture agent whose sessions outlive it (``--history``), so a restart can load them."""
    argv = [sys.executable, "-u", str(AGENTS / script), "--quiet"]
    return AgentSpec([*argv, "--history", str(tmp_path / "history.json"), *flags])


class Events(list[dict[str, Any]]):
    """The events so far; :meth:`wait_for` wakes on each new one (no polling)."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = anyio.Event()

    def add(self, event: dict[str, Any]) -> None:
        self.append(event)
        self._changed.set()
        self._changed = anyio.Event()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self if e["event"] == kind]

    async def wait_for(self, kind: str, count: int = 1) -> None:
        with anyio.fail_after(20):
            while len(self.of(kind)) < count:
                await self._changed.wait()


@asynccontextmanager
async def session(
    tmp_path: Path, spec: AgentSpec, store_url: str | None = None
) -> AsyncIterator[tuple[Conversation, Store, Events]]:
    """``store_url``: a PostgreSQL store instead of the SQLite file in ``tmp_path``."""
    store: Store
    if store_url is None:
        store = QueueStore.open(tmp_path / "store.db")
    else:
        from acp_bridge.pgstore.store import PgStore

        store = PgStore.open(store_url)
    record = store.latest_conversation() or store.create_conversation(
        agent={"argv": list(spec.argv)}, cwd=str(tmp_path), now=1.0
    )
    events = Events()
    try:
        async with (
            open_supervised_agent(spec, OPTIONS) as supervised,
            open_conversation(store, supervised, record, policy=POLICY) as conv,
        ):
            stream = conv.subscribe(replay=True)
            async with anyio.create_task_group() as tg:

                async def collect() -> None:
                    with stream:
                        async for event in stream:
                            events.add(event)

                tg.start_soon(collect)
                yield conv, store, events
                tg.cancel_scope.cancel()
    finally:
        store.close()


async def drained(conv: Conversation) -> None:
    with anyio.fail_after(20):
        assert await conv.wait_idle() == "drained"


def stored(store: Store) -> list[StoredMessage]:
    record = store.latest_conversation()
    assert record is not None
    return store.messages(record.id)
