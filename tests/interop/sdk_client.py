"""An interop client on the official ACP Python SDK (agent-client-protocol), for scripts/interop.py.

Usage: ``python sdk_client.py SCENARIO_JSON -- AGENT_CMD [ARGS...]``

AGENT_CMD is the agent itself, or ``acp-bridge proxy -- AGENT`` in front of it. The scenario is
a JSON object: ``hello`` (a prompt whose answer streams text), ``expect`` (a text the answer must
contain), ``slow`` (a prompt that runs long enough to be cancelled, or null), ``load`` (try
``session/load`` in a second process when the agent offers it), ``cwd`` and ``timeout`` (seconds
per step). It prints one JSON line: ``{"checks": {NAME: {"ok": bool, "detail": str}}, "info":
{...}}``; a check that was not attempted is absent, so the caller can say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, Implementation

Checks = dict[str, dict[str, Any]]


class Recorder:
    """The client side: keeps every text chunk, denies permission (nothing here asks for it)."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.first_chunk = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            text = getattr(update.content, "text", None)
            if isinstance(text, str):
                self.chunks.append(text)
                self.first_chunk.set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        from acp.schema import DeniedOutcome, RequestPermissionResponse

        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def text(self) -> str:
        return "".join(self.chunks)

    def reset(self) -> None:
        self.chunks.clear()
        self.first_chunk = asyncio.Event()


def verdict(ok: bool, detail: str) -> dict[str, Any]:
    return {"ok": ok, "detail": detail[:400]}


async def initialize(conn: Any, checks: Checks, info: dict[str, Any]) -> bool:
    response = await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(),
        client_info=Implementation(name="interop-sdk-client", version="1"),
    )
    caps = response.agent_capabilities
    info["agentInfo"] = response.agent_info.model_dump() if response.agent_info else None
    info["loadSession"] = bool(caps and caps.load_session)
    checks["initialize"] = verdict(True, f"protocol {response.protocol_version}")
    return True


async def streamed_turn(
    conn: Any, rec: Recorder, session_id: str, scenario: dict[str, Any], name: str
) -> None:
    rec.reset()
    answer = await conn.prompt(session_id=session_id, prompt=[text_block(scenario["hello"])])
    text = rec.text()
    ok = answer.stop_reason == "end_turn" and scenario["expect"] in text and len(rec.chunks) > 0
    detail = f"{answer.stop_reason}, {len(rec.chunks)} chunks: {text[:120]!r}"
    CHECKS[name] = verdict(ok, detail if ok else f"expected {scenario['expect']!r}; {detail}")


CHECKS: Checks = {}
STEP = ["initialize"]
"""The check running now: an exception is that check's failure."""


async def cancelled_turn(
    conn: Any, rec: Recorder, session_id: str, scenario: dict[str, Any]
) -> None:
    rec.reset()
    turn = asyncio.ensure_future(
        conn.prompt(session_id=session_id, prompt=[text_block(scenario["slow"])])
    )
    # An agent that says nothing before it answers (fast-agent's slow model) is cancelled anyway.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(rec.first_chunk.wait(), timeout=1.0)
    await conn.cancel(session_id=session_id)
    answer = await asyncio.wait_for(turn, timeout=scenario["timeout"])
    ok = answer.stop_reason == "cancelled"
    CHECKS["cancel"] = verdict(
        ok, f"stopReason {answer.stop_reason} after {len(rec.chunks)} chunks"
    )


async def restarted_turn(
    conn: Any, rec: Recorder, session_id: str, scenario: dict[str, Any], proxy_pid: int
) -> None:
    """SIGKILL the agent under the proxy (the proxy's child), then prompt the same session:
    the proxy must have restarted the agent and restored the session. A prompt the crash cut
    (the proxy had not seen the exit yet) is answered with a recoverable error: prompt again,
    as an editor would, once."""
    import psutil

    proxy = psutil.Process(proxy_pid)
    victims = proxy.children()
    if len(victims) != 1:
        CHECKS["restart"] = verdict(False, f"expected one agent under the proxy, found {victims}")
        return
    victims[0].kill()
    victims[0].wait(scenario["timeout"])
    retried = ""
    try:
        await asyncio.wait_for(
            streamed_turn(conn, rec, session_id, scenario, "restart"), scenario["timeout"]
        )
    except Exception as error:  # the cut prompt's answer: only a recoverable one is retried
        data = getattr(error, "data", None) or {}
        if not data.get("recoverable"):
            raise
        retried = f"first prompt cut ({str(error).splitlines()[0][:80]}), prompted again; "
        await asyncio.wait_for(
            streamed_turn(conn, rec, session_id, scenario, "restart"), scenario["timeout"]
        )
    check = CHECKS["restart"]
    check["detail"] = f"agent pid {victims[0].pid} SIGKILLed; {retried}then {check['detail']}"


def spawn(rec: Recorder, argv: list[str], scenario: dict[str, Any]) -> Any:
    """Start the agent (or the proxy in front of it) with this process's whole environment.

    Without ``env`` the SDK gives the child a trimmed one (HOME, PATH, ...), so ``python -m
    acp_bridge proxy`` lost PYTHONPATH and imported whatever acp_bridge was installed, or none.
    """
    return spawn_agent_process(rec, argv[0], *argv[1:], env=dict(os.environ), cwd=scenario["cwd"])  # type: ignore[arg-type]


async def first_process(
    argv: list[str], scenario: dict[str, Any], info: dict[str, Any]
) -> str | None:
    rec = Recorder()
    timeout = scenario["timeout"]
    async with spawn(rec, argv, scenario) as (conn, _proc):
        await asyncio.wait_for(initialize(conn, CHECKS, info), timeout)
        STEP[0] = "session/new"
        session = await asyncio.wait_for(
            conn.new_session(cwd=scenario["cwd"], mcp_servers=[]), timeout
        )
        CHECKS["session/new"] = verdict(True, session.session_id)
        STEP[0] = "stream"
        await asyncio.wait_for(
            streamed_turn(conn, rec, session.session_id, scenario, "stream"), timeout
        )
        if scenario.get("slow"):
            STEP[0] = "cancel"
            await cancelled_turn(conn, rec, session.session_id, scenario)
        if scenario.get("restart"):
            STEP[0] = "restart"
            await restarted_turn(conn, rec, session.session_id, scenario, _proc.pid)
        return str(session.session_id)


async def second_process(argv: list[str], scenario: dict[str, Any], session_id: str) -> None:
    rec = Recorder()
    timeout = scenario["timeout"]
    async with spawn(rec, argv, scenario) as (conn, _proc):
        await asyncio.wait_for(initialize(conn, {}, {}), timeout)
        await asyncio.wait_for(
            conn.load_session(cwd=scenario["cwd"], session_id=session_id, mcp_servers=[]), timeout
        )
        replayed = len(rec.chunks)
        await asyncio.wait_for(streamed_turn(conn, rec, session_id, scenario, "load"), timeout)
        check = CHECKS["load"]
        check["detail"] = f"new process, {replayed} chunks replayed; then {check['detail']}"


async def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: sdk_client.py SCENARIO_JSON -- AGENT_CMD [ARGS...]", file=sys.stderr)
        return 2
    scenario: dict[str, Any] = json.loads(argv[0])
    agent_argv = argv[2:]
    info: dict[str, Any] = {}
    try:
        session_id = await first_process(agent_argv, scenario, info)
        STEP[0] = "load"
        if session_id and scenario.get("load") and info.get("loadSession"):
            await second_process(agent_argv, scenario, session_id)
    except BaseException as error:
        CHECKS[STEP[0]] = verdict(False, f"{type(error).__name__}: {error}")
    print(json.dumps({"checks": CHECKS, "info": info}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
