"""Permission decisions and updates are logged (resuming checks the tool calls the history used;
the host replays the updates), but not one commit each: they wait in the turn's batch, which is
committed soon (issue 22: see conversation/update_log.py), in the order they happened."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.store import QueueStore
from acp_bridge.process.spec import AgentSpec

pytestmark = pytest.mark.anyio

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"


async def test_permission_decisions_and_updates_are_logged_in_order(
    tmp_path: Path,
) -> None:
    spec = AgentSpec([sys.executable, "-u", str(AGENTS / "permission_agent.py")], name="perm")
    options = ClientOptions(permission=PermissionPolicy(PermissionMode.ALLOW_ALL))
    store = QueueStore.open(tmp_path / "q.db")
    record = store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
    try:
        async with (
            open_supervised_agent(spec, options) as agent,
            open_conversation(store, agent, record) as conv,
        ):
            await conv.send("permission; permission; permission")
            with anyio.fail_after(20):
                assert await conv.wait_idle() == "drained"
        log = store.events(record.id)
    finally:
        store.close()
    kinds = [e.kind for e in log if e.seq == 1]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_ended"
    permissions = [e for e in log if e.kind == "permission"]
    assert len(permissions) == 3
    assert all(e.data["toolCall"] and e.data["decision"] == "allow_once" for e in permissions)
    # In the order they happened: between the turn's start and its end, ids increasing.
    started = next(e for e in log if e.kind == "turn_started")
    ended = next(e for e in log if e.kind == "turn_ended")
    assert all(started.id < e.id < ended.id for e in permissions)
    updates = [e for e in log if e.kind == "update"]
    assert updates and all(started.id < e.id < ended.id for e in updates)
    assert all(e.data["update"]["sessionUpdate"] for e in updates)
