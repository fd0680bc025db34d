"""What ``run`` prints: the agent's text on stdout, or NDJSON events with ``--json``.

Human mode writes ``agent_message_chunk`` text as it streams and a newline at the end of each
turn; failures and restarts go to stderr as one line each, naming the agent.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

__all__ = ["EventPrinter"]


class EventPrinter:
    def __init__(self, *, json_mode: bool, agent: str) -> None:
        self.json_mode = json_mode
        self.agent = agent
        self._at_line_start = True
        self.shown: set[str] = set()
        """The kinds of event shown so far."""

    async def run(self, events: MemoryObjectReceiveStream[dict[str, Any]]) -> None:
        with events:
            async for event in events:
                self.show(event)

    async def flush(self) -> None:
        if not self._at_line_start:
            sys.stdout.write("\n")
            self._at_line_start = True
        sys.stdout.flush()
        await anyio.lowlevel.checkpoint()

    def show(self, event: dict[str, Any]) -> None:
        self.shown.add(event["event"])
        if self.json_mode:
            sys.stdout.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
            sys.stdout.flush()
            return
        kind = event["event"]
        if kind == "update":
            update = event.get("update") or {}
            content = update.get("content")
            if update.get("sessionUpdate") == "agent_message_chunk" and isinstance(content, dict):
                text = str(content.get("text", ""))
                if text:
                    sys.stdout.write(text)
                    sys.stdout.flush()
                    self._at_line_start = text.endswith("\n")
        elif kind == "turn_ended":
            if not self._at_line_start:
                sys.stdout.write("\n")
                self._at_line_start = True
            sys.stdout.flush()
            if event.get("state") != "done":
                self._note(f"message {event['seq']} ended {event.get('state')}")
        elif kind == "turn_failed":
            recoverable = "recoverable" if event.get("recoverable") else "not recoverable"
            error = event.get("error") or {}
            message = error.get("message") if isinstance(error, dict) else error
            self._note(f"message {event['seq']} failed ({recoverable}): {message}")
        elif kind == "agent_exited":
            self._note(f"agent {self.agent} {event.get('reason')}")
        elif kind == "agent_restarted":
            self._note(f"restarting {self.agent} (attempt {event.get('attempt')})")
        elif kind == "session_replaced":
            self._note(
                f"session {event.get('old')} could not be restored; continuing in "
                f"{event.get('new')} ({event.get('reason')})"
            )
        elif kind == "agent_gave_up":
            self._note(f"giving up on {self.agent}: {event.get('reason')}")

    def agent_stderr(self, line: str) -> None:
        print(f"[{self.agent}] {line}", file=sys.stderr, flush=True)

    def _note(self, text: str) -> None:
        if not self._at_line_start:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._at_line_start = True
        print(f"acp-bridge: {text}", file=sys.stderr, flush=True)
