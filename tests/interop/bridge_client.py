"""An interop client on acp-bridge's own library, for scripts/interop.py.

Usage: ``python bridge_client.py SCENARIO_JSON -- AGENT_CMD [ARGS...]`` (the scenario is the one
tests/interop/sdk_client.py reads; it prints the same one-line JSON verdicts).

- ``open_supervised_agent``: initialize, ``session/new``, a streamed turn, a cancelled turn
  (``Session.cancel``; the turn must close as ``cancelled`` within the scenario's timeout).
- ``open_conversation`` for ``load``: a conversation is started on a fresh agent process and
  sent the ``hello`` prompt; then the bridge side is closed and opened again on a new agent
  process, as a restarted program would, so the stored session is restored with
  ``session/load``; the ``session`` event must say ``load`` and the next message must end
  ``done`` with the expected text.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.client.events import AgentGaveUp, SessionReplaced, SessionRestored, UpdateReceived
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.session import Session
from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store import QueueStore
from acp_bridge.process.spec import AgentSpec

CHECKS: dict[str, dict[str, Any]] = {}
STEP = ["initialize"]
"""The check running now: an exception is that check's failure."""


def verdict(ok: bool, detail: str) -> dict[str, Any]:
    return {"ok": ok, "detail": detail[:400]}


def chunk_text(raw: dict[str, Any]) -> str | None:
    if raw.get("sessionUpdate") != "agent_message_chunk":
        return None
    content = raw.get("content") or {}
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else None


def judge_stream(name: str, stop: str | None, chunks: list[str], expect: str) -> None:
    text = "".join(chunks)
    ok = stop in ("end_turn", "done") and expect in text and bool(chunks)
    detail = f"{stop}, {len(chunks)} chunks: {text[:120]!r}"
    CHECKS[name] = verdict(ok, detail if ok else f"expected {expect!r}; {detail}")


async def supervised_part(
    agent: SupervisedAgent, scenario: dict[str, Any], info: dict[str, Any]
) -> None:
    init = agent.connection.init
    info["agentInfo"] = init.agent_info.model_dump() if init.agent_info else None
    info["loadSession"] = bool(init.agent_capabilities.load_session)
    CHECKS["initialize"] = verdict(True, f"protocol {init.protocol_version}")
    STEP[0] = "session/new"
    session = await agent.new_session(Path(scenario["cwd"]))
    CHECKS["session/new"] = verdict(True, session.id)
    STEP[0] = "stream"
    chunks: list[str] = []
    async with session.prompt(scenario["hello"]) as turn:
        async for event in turn:
            if isinstance(event, UpdateReceived) and (text := chunk_text(event.raw)) is not None:
                chunks.append(text)
        response = await turn.wait()
    judge_stream("stream", response.stop_reason, chunks, scenario["expect"])
    if not scenario.get("slow"):
        return
    STEP[0] = "cancel"
    turn = await session.begin(scenario["slow"])
    seen: list[str] = []
    first = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                async for event in turn:
                    if isinstance(event, UpdateReceived) and (text := chunk_text(event.raw)):
                        seen.append(text)
                        first.set()

            tg.start_soon(read)
            with anyio.move_on_after(1.0):  # an agent silent until it answers is cancelled anyway
                await first.wait()
            await session.cancel()
            with anyio.fail_after(scenario["timeout"]):
                response = await turn.wait()
    finally:
        await session.end(turn)
    ok = response.stop_reason == "cancelled"
    CHECKS["cancel"] = verdict(ok, f"stopReason {response.stop_reason} after {len(seen)} chunks")
    if scenario.get("restart"):
        STEP[0] = "restart"
        await restarted_turn(agent, session, scenario)


async def restarted_turn(
    agent: SupervisedAgent, session: Session, scenario: dict[str, Any]
) -> None:
    """SIGKILL the agent between turns; the supervisor must restart it and restore the session
    (``SessionRestored``, not ``SessionReplaced``); then a turn on the same session streams."""
    pid = agent.pid
    assert pid is not None
    events = agent.subscribe()
    with events:
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(scenario["timeout"]):
            async for event in events:
                if isinstance(event, SessionRestored | SessionReplaced | AgentGaveUp):
                    break
    chunks: list[str] = []
    async with session.prompt(scenario["hello"]) as turn:
        async for turn_event in turn:
            if isinstance(turn_event, UpdateReceived) and (text := chunk_text(turn_event.raw)):
                chunks.append(text)
        response = await turn.wait()
    judge_stream("restart", response.stop_reason, chunks, scenario["expect"])
    restored = isinstance(event, SessionRestored)
    how = f"restored by {event.how}" if isinstance(event, SessionRestored) else repr(event)
    CHECKS["restart"]["detail"] = (
        f"agent pid {pid} SIGKILLed, {how}; then {CHECKS['restart']['detail']}"
    )
    CHECKS["restart"]["ok"] = CHECKS["restart"]["ok"] and restored


async def conversation_turn(
    spec: AgentSpec, store: QueueStore, record: ConversationRecord, text: str
) -> tuple[str, str | None, list[str]]:
    """Open the conversation on a new agent process, send ``text``; (how the session was
    opened, the message's final state, its chunks)."""
    events: list[dict[str, Any]] = []
    async with (
        open_supervised_agent(spec, ClientOptions()) as agent,
        open_conversation(store, agent, record) as conv,
    ):
        stream = conv.subscribe(replay=True)
        await conv.send(text)
        await conv.wait_idle()
        with stream:
            while True:
                try:
                    events.append(stream.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
    how = next((e.get("how", "?") for e in events if e["event"] == "session"), "no session event")
    chunks = [t for e in events if e["event"] == "update" and (t := chunk_text(e["update"]))]
    state = store.messages(record.id)[-1].state
    return str(how), state, chunks


async def conversation_part(spec: AgentSpec, scenario: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="interop-store-") as tmp:
        store = QueueStore.open(Path(tmp) / "store.db")
        try:
            record = store.create_conversation(
                agent={"argv": list(spec.argv)}, cwd=scenario["cwd"], now=1.0
            )
            how, state, chunks = await conversation_turn(spec, store, record, scenario["hello"])
            if state != "done":
                CHECKS["load"] = verdict(
                    False, f"the first conversation turn ended {state} ({how})"
                )
                return
            reread = store.get_conversation(record.id)  # now holding the agent's session id
            assert reread is not None
            how, state, chunks = await conversation_turn(spec, store, reread, scenario["hello"])
            judge_stream("load", state, chunks, scenario["expect"])
            CHECKS["load"]["detail"] = (
                f"bridge reopened, session {how}; then {CHECKS['load']['detail']}"
            )
            if how != "load":
                CHECKS["load"]["ok"] = False
        finally:
            store.close()


async def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: bridge_client.py SCENARIO_JSON -- AGENT_CMD [ARGS...]", file=sys.stderr)
        return 2
    scenario: dict[str, Any] = json.loads(argv[0])
    spec = AgentSpec(argv[2:], cwd=Path(scenario["cwd"]))
    info: dict[str, Any] = {}
    try:
        with anyio.fail_after(scenario["timeout"] * 4):
            async with open_supervised_agent(spec, ClientOptions()) as agent:
                await supervised_part(agent, scenario, info)
        STEP[0] = "load"
        if scenario.get("load") and info.get("loadSession"):
            with anyio.fail_after(scenario["timeout"] * 4):
                await conversation_part(spec, scenario)
    except BaseException as error:
        CHECKS[STEP[0]] = verdict(False, f"{type(error).__name__}: {error}")
    print(json.dumps({"checks": CHECKS, "info": info}))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
