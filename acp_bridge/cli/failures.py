"""How ``run`` reports an agent it could not start, initialize or authenticate.

On stderr: one sentence naming the agent, what happened and what to do next (for auth, the
agent's own message and its auth methods). With ``--json``, the same facts as an ``error``
event on stdout, so a script reading only stdout still learns why nothing happened.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED
from acp_bridge.cli.render import EventPrinter
from acp_bridge.errors import AuthRequiredError, BridgeError, SpawnError

__all__ = ["report_agent_failure", "report_auth_required"]


def report_auth_required(printer: EventPrinter, agent: str, exc: AuthRequiredError) -> int:
    """The agent wants ``authenticate`` first: what it said, its methods, and the two ways on."""
    said = f": {exc.agent_message}" if exc.agent_message else ""
    lines = [f"{agent} requires authentication{said}."]
    if exc.methods:
        lines.append("Its auth methods:")
        for method_id, name, description in exc.methods:
            about = f" - {description}" if description else ""
            lines.append(f"  {method_id}  {name}{about}")
        lines.append(
            f"Run again with --auth-method {exc.methods[0][0]} (or another id above), or log in "
            "with the agent's own tool first."
        )
    else:
        lines.append("It lists no auth methods: log in with the agent's own tool first.")
    _say("\n".join(lines))
    _event(
        printer,
        "auth_required",
        agent,
        " ".join(line.strip() for line in lines),
        agentMessage=exc.agent_message,
        authMethods=[
            {"id": method_id, "name": name, "description": description}
            for method_id, name, description in exc.methods
        ],
    )
    return EXIT_AGENT_FAILED


def report_agent_failure(printer: EventPrinter, agent: str, exc: BridgeError) -> int:
    """The agent could not be started or initialized (or its session could not be opened)."""
    if isinstance(exc, AuthRequiredError):
        return report_auth_required(printer, agent, exc)
    if isinstance(exc, SpawnError):
        message = f"{exc}. Check the agent command."
        code = "spawn_failed"
    else:
        message = str(exc)
        code = "agent_failed"
    _say(message)
    _event(printer, code, agent, message)
    return EXIT_AGENT_FAILED


def _event(printer: EventPrinter, code: str, agent: str, message: str, **facts: Any) -> None:
    if printer.json_mode:
        printer.show(
            {
                "event": "error",
                "ts": round(time.time(), 6),
                "code": code,
                "agent": agent,
                "message": message,
                **facts,
            }
        )


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)
