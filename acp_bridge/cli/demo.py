"""``acp-bridge demo``: an offline walk through what exists so far.

Interim: until the built-in reference agent lands, the demo drives the stdlib fixture echo agent
shipped in this repository (``fixtures/agents/echo_agent.py``), so it runs from a clone. It
shows the JSON-RPC peer and the launcher doing real work: initialize, session/new, a streamed
turn, a cancelled turn, and a shutdown that leaves no process behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from acp_bridge import __version__
from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_OK, EXIT_TURN_FAILED
from acp_bridge.errors import AgentError, BridgeError
from acp_bridge.process.launcher import open_agent
from acp_bridge.process.spec import AgentSpec
from acp_bridge.rpc.peer import JsonRpcPeer

__all__ = ["demo_command", "run_demo"]

_FIXTURE = Path("fixtures") / "agents" / "echo_agent.py"
_STEP_TIMEOUT_S = 15.0
_WAITING = "echo (this turn waits to be cancelled) ; wait"
"""A fixture program: echo a line, then block until session/cancel."""


def _progress(text: str) -> None:
    print(f"acp-bridge demo: {text}", file=sys.stderr, flush=True)


def _find_agent_script(explicit: str | None) -> Path | None:
    if explicit:
        path = Path(explicit)
        return path if path.is_file() else None
    source_root = Path(__file__).resolve().parents[2]
    for root in (Path.cwd(), source_root):
        if (root / _FIXTURE).is_file():
            return root / _FIXTURE
    return None


def demo_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    return run_demo(args.agent_script)


def run_demo(agent_script: str | None) -> int:
    script = _find_agent_script(agent_script)
    if script is None:
        print(
            "acp-bridge demo: cannot find the fixture echo agent "
            f"({agent_script or _FIXTURE}). Run the demo from a clone of acp-bridge, "
            "or pass --agent-script PATH.",
            file=sys.stderr,
        )
        return EXIT_AGENT_FAILED
    try:
        anyio.run(_demo, script)
    except Exception as raised:
        exc = _leaf(raised)
        if isinstance(exc, AgentError):
            print(f"acp-bridge demo: the agent failed: {exc}", file=sys.stderr)
            return EXIT_AGENT_FAILED
        if isinstance(exc, BridgeError | TimeoutError):
            reason = str(exc) or f"a step took longer than {_STEP_TIMEOUT_S:.0f} s"
            print(f"acp-bridge demo: {reason}", file=sys.stderr)
            return EXIT_TURN_FAILED
        raise
    return EXIT_OK


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _demo(script: Path) -> None:
    spec = AgentSpec([sys.executable, "-u", str(script)], name="echo-agent")
    _progress(f"starting {spec.name}: {spec.display_command}")
    async with open_agent(spec) as agent:
        peer = JsonRpcPeer(agent.stdout, agent.stdin, name=spec.name)
        updates = _Updates()
        peer.on_notification("session/update", updates.show)
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run)
            with anyio.fail_after(_STEP_TIMEOUT_S):
                await _walk_through(peer, updates)
            await peer.aclose()
        pid = agent.pid
    _progress(f"agent stopped ({agent.exit_status.describe() if agent.exit_status else '?'})")
    _progress(f"process group {pid} is empty: {not _group_alive(pid)}")


async def _walk_through(peer: JsonRpcPeer, updates: _Updates) -> None:
    init = await peer.request(
        "initialize",
        {
            "protocolVersion": 1,
            "clientCapabilities": {},
            "clientInfo": {"name": "acp-bridge", "version": __version__},
        },
    )
    info = init.get("agentInfo") or {}
    _progress(
        f"initialized {info.get('name', '?')} {info.get('version', '')}, protocol "
        f"{init.get('protocolVersion')}, loadSession={bool(_caps(init).get('loadSession'))}"
    )
    session = await peer.request("session/new", {"cwd": os.getcwd(), "mcpServers": []})
    session_id = session["sessionId"]
    _progress(f"session {session_id}")

    _progress("prompt 1: streaming the reply to stdout")
    started = time.perf_counter()
    result = await peer.request(
        "session/prompt",
        {"sessionId": session_id, "prompt": [{"type": "text", "text": "Hello from acp-bridge"}]},
    )
    print(flush=True)
    _progress(
        f"turn ended: {result['stopReason']} after {updates.count} updates in "
        f"{(time.perf_counter() - started) * 1000:.1f} ms"
    )

    _progress("prompt 2: a turn that waits for session/cancel")
    async with anyio.create_task_group() as tg:
        outcome: dict[str, Any] = {}

        async def prompt() -> None:
            outcome.update(
                await peer.request(
                    "session/prompt",
                    {"sessionId": session_id, "prompt": [{"type": "text", "text": _WAITING}]},
                )
            )

        updates.arrived = anyio.Event()
        tg.start_soon(prompt)
        await updates.arrived.wait()  # the agent says it is waiting, then waits
        cancelled_at = time.perf_counter()
        await peer.notify("session/cancel", {"sessionId": session_id})
    print(flush=True)
    _progress(
        f"turn ended: {outcome['stopReason']}, "
        f"{(time.perf_counter() - cancelled_at) * 1000:.1f} ms after session/cancel"
    )


class _Updates:
    """Shows agent text on stdout as it streams, and counts updates."""

    def __init__(self) -> None:
        self.count = 0
        self.arrived = anyio.Event()

    def show(self, params: Any) -> None:
        self.count += 1
        self.arrived.set()
        update = params.get("update", {}) if isinstance(params, dict) else {}
        content = update.get("content")
        if update.get("sessionUpdate") == "agent_message_chunk" and isinstance(content, dict):
            sys.stdout.write(str(content.get("text", "")))
            sys.stdout.flush()


def _caps(init: dict[str, Any]) -> dict[str, Any]:
    caps = init.get("agentCapabilities")
    return caps if isinstance(caps, dict) else {}


def _group_alive(pgid: int) -> bool:
    from acp_bridge.process.killer import group_members

    return bool(group_members(pgid))
