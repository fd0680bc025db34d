"""How ``run`` reports an agent it could not start, initialize or authenticate.

On stderr: one line naming the agent, what happened and what to do next. For auth: what the
agent said (the built-in agent names the variable its provider's key is read from), and the
``--auth-method`` choices when the agent lists any; the methods' descriptions and the agent's
raw message are in the ``--json`` event, and the provider's long account in the agent's own log
(``-v``). With ``--json``, the same facts as an ``error`` event on stdout, so a script reading
only stdout still learns why nothing happened.
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
    """The agent wants ``authenticate`` first: what it said, and the way on, in one line."""
    line = _auth_line(agent, exc)
    _say(line)
    _event(
        printer,
        "auth_required",
        agent,
        line,
        agentMessage=exc.agent_message,
        authMethods=[
            {"id": method_id, "name": name, "description": description}
            for method_id, name, description in exc.methods
        ],
    )
    return EXIT_AGENT_FAILED


def _auth_line(agent: str, exc: AuthRequiredError) -> str:
    """``<agent> requires authentication: <what it said>; <the way on>`` (the command line's
    flag, never the library's option)."""
    said = exc.agent_message.strip().rstrip(".") or "it did not say why"
    if not exc.methods:  # the agent's message is the only advice there is (an API key, say)
        return f"{agent} requires authentication: {said}"
    shown = [
        method_id if name in ("", method_id) else f"{method_id} ({name})"
        for method_id, name, _ in exc.methods
    ]
    if len(shown) == 1:
        flag = f"--auth-method {shown[0]}"
    else:
        flag = f"--auth-method ID (one of {', '.join(shown)})"
    return (
        f"{agent} requires authentication: {said}; run again with {flag}, or log in with the "
        "agent's own tool first"
    )


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
