"""What ``run`` prints: the agent's text on stdout, or NDJSON events with ``--json``.

Plain mode streams ``agent_message_chunk`` text to stdout as it arrives. The rest of a turn is
rendered compactly, one line each: thoughts, tool calls (title, kind, status changes), plans,
permission decisions, notices (``[notice] warning: title - description``), context compactions
(``[compaction] in_progress``, the summary streamed as ``[compaction summary] ...``, then
``[compaction] completed``), and a closing ``[done] end_turn``. Those lines go to stdout when it
is a terminal (a person reads one transcript), and to stderr when stdout is a pipe or a file, so
``acp-bridge run -m ... > answer.txt`` still holds the agent's text alone. Color only on a
terminal, and never with ``NO_COLOR`` set or ``TERM=dumb``.

Failures, restarts and hints (e.g. the agent asked for files and ``--allow-fs`` is off) go to
stderr as one line each, naming the agent.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final, Protocol, TextIO, cast

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from pydantic_core import to_json

from acp_bridge.cli.guarded_output import GuardedOutput, is_terminal

__all__ = ["AuthFailures", "EventPrinter", "wants_color"]

_TITLES_KEPT: Final = 256
"""Tool-call titles remembered for their updates; the oldest is forgotten past this bound."""

_PLAN_MARKS: Final = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}

_HINTS: Final = {
    "fs/read_text_file": "the agent asked to read a file; --allow-fs lets it (inside the cwd)",
    "fs/write_text_file": "the agent asked to write a file; --allow-fs lets it (inside the cwd)",
    "terminal/create": "the agent asked to run a command; --allow-terminal lets it",
}

_COLORS: Final = {
    "dim": "2",
    "tool": "36",
    "plan": "34",
    "permission": "33",
    "done": "32",
    "notice": "35",
}
_NOTICE_STYLES: Final = {"error": "permission", "warning": "permission"}


class AuthFailures(Protocol):
    """What knows whether the agent refused a turn for want of authentication (the
    supervised agent)."""

    @property
    def auth_failure(self) -> BaseException | None: ...


def wants_color(stream: TextIO) -> bool:
    """Color on a terminal only, unless ``NO_COLOR`` (any value) or ``TERM=dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


class EventPrinter:
    def __init__(
        self,
        *,
        json_mode: bool,
        agent: str,
        permission_mode: str = "deny",
        text: TextIO | None = None,
        notes: TextIO | None = None,
        on_text_closed: Callable[[], None] | None = None,
        verbose: bool | None = None,
    ) -> None:
        self.json_mode = json_mode
        # With -v the agent's start and each restored session get a line too (the log leaves
        # out its own copy of every lifecycle event: see cli.main.configure_logging).
        self._verbose = (
            logging.getLogger().isEnabledFor(logging.INFO) if verbose is None else verbose
        )
        self.agent = agent
        self._permission_mode = permission_mode
        given = text or sys.stdout
        already = isinstance(given, GuardedOutput) and on_text_closed is None  # run's stdout
        self._text = given if already else cast(TextIO, GuardedOutput(given, on_text_closed))
        self._notes = notes or sys.stderr
        # The turn's structure goes with the text on a terminal, else out of the text's way.
        self._decor = self._text if is_terminal(self._text) else self._notes
        self._color = wants_color(self._decor)
        self._at_line_start: dict[int, bool] = {}
        self._in_thought = False
        self._streaming = ""
        """The label of the decorated text being streamed (a thought, a compaction summary)."""
        self._titles: OrderedDict[str, str] = OrderedDict()
        self._hinted: set[str] = set()
        self._auth_failures: AuthFailures | None = None
        self.shown: set[str] = set()
        """The kinds of event shown so far."""

    async def run(self, events: MemoryObjectReceiveStream[dict[str, Any]]) -> None:
        with events:
            async for event in events:
                self.show(event)

    async def flush(self) -> None:
        self._end_line(self._text)
        self._text.flush()
        await anyio.lowlevel.checkpoint()

    def show(self, event: dict[str, Any]) -> None:
        self.shown.add(event["event"])
        if self.json_mode:
            # Written and flushed at once: a script reading the stream acts on each event as
            # it happens (and a turn's events interleave with nothing else on stdout).
            self._text.write(_json_line(event))
            self._text.flush()
            return
        kind = event["event"]
        if kind == "update":
            self._update(event.get("update") or {})
        elif kind == "permission":
            self._permission(event)
        elif kind == "turn_ended":
            self._turn_ended(event)
        elif kind == "turn_failed":
            if self._reported_at_the_end(event):
                return
            recoverable = "recoverable" if event.get("recoverable") else "not recoverable"
            error = event.get("error") or {}
            message = error.get("message") if isinstance(error, dict) else error
            self._note(f"message {event['seq']} failed ({recoverable}): {message}")
        elif kind == "steered":
            self._note(f"message {event['seq']} joined the turn of message {event.get('into')}")
        elif kind == "steer_fallback":
            self._note(f"message {event['seq']} queued first, not steered ({event.get('reason')})")
        elif kind == "agent_started" and self._verbose:
            self._note(f"agent {self.agent} started: {_started(event)}")
        elif kind == "session_restored" and self._verbose:
            self._note(f"session {event.get('sessionId')} restored ({event.get('how')})")
        elif kind == "agent_exited":
            self._note(f"agent {self.agent} ended: {event.get('reason')}")
        elif kind == "agent_restarted":
            self._note(f"restarting {self.agent} (attempt {event.get('attempt')})")
        elif kind == "session_replaced":
            self._note(
                f"session {event.get('old')} could not be restored; continuing in "
                f"{event.get('new')} ({event.get('reason')})"
            )
        elif kind == "agent_gave_up":
            self._note(f"giving up on {self.agent}: {event.get('reason')}")

    def leave_auth_failure_to_the_end(self, agent: AuthFailures) -> None:
        """The command reports ``agent.auth_failure`` in one line when it ends (``run``: see
        :func:`.failures.report_auth_required`), so the failed turn's note is not printed too."""
        self._auth_failures = agent

    def _reported_at_the_end(self, event: dict[str, Any]) -> bool:
        failure = None if self._auth_failures is None else self._auth_failures.auth_failure
        error = event.get("error")
        return (
            failure is not None and isinstance(error, dict) and error.get("message") == str(failure)
        )

    def capability_refused(self, method: str) -> None:
        """The agent called ``method``, which is off: hint once at the flag that allows it."""
        key = "terminal/create" if method.startswith("terminal/") else method
        hint = _HINTS.get(key)
        if hint is not None and key not in self._hinted:
            self._hinted.add(key)
            self._note(f"hint: {hint}")

    def agent_stderr(self, line: str) -> None:
        self._end_line(self._notes)
        print(f"[{self.agent}] {line}", file=self._notes, flush=True)

    # -- plain rendering ------------------------------------------------------------------------

    def _update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        content = update.get("content")
        if kind == "agent_message_chunk" and isinstance(content, dict):
            self._end_thought()
            self._write(self._text, str(content.get("text", "")))
        elif kind == "agent_thought_chunk" and isinstance(content, dict):
            self._stream_decor("[thought] ", str(content.get("text", "")))
        elif kind == "compaction_summary_chunk" and isinstance(content, dict):
            self._stream_decor("[compaction summary] ", str(content.get("text", "")))
        elif kind == "compaction_update":
            error = update.get("error")
            why = f": {error}" if isinstance(error, str) and error else ""
            self._line("notice", f"[compaction] {update.get('status') or 'updated'}{why}")
        elif kind == "notice":
            severity = str(update.get("severity") or "info")
            text = f"[notice] {severity}: {update.get('title') or ''}"
            description = update.get("description")
            if isinstance(description, str) and description:
                text += f" - {' '.join(description.split())}"
            self._line(_NOTICE_STYLES.get(severity, "notice"), text)
        elif kind == "tool_call":
            call_id = str(update.get("toolCallId", ""))
            title = str(update.get("title") or call_id or "a tool call")
            self._remember(call_id, title)
            kind_text = f" ({update['kind']})" if update.get("kind") else ""
            status = f" {update['status']}" if update.get("status") else ""
            self._line("tool", f"[tool] {title}{kind_text}{status}")
        elif kind == "tool_call_update" and update.get("status"):
            call_id = str(update.get("toolCallId", ""))
            title = update.get("title") or self._titles.get(call_id) or call_id
            self._remember(call_id, str(title))
            self._line("tool", f"[tool] {title} {update['status']}")
        elif kind == "plan" and isinstance(update.get("entries"), list):
            entries = [e for e in update["entries"] if isinstance(e, dict)]
            self._line("plan", f"[plan] {len(entries)} step{'s' if len(entries) != 1 else ''}")
            for entry in entries:
                mark = _PLAN_MARKS.get(str(entry.get("status")), "[ ]")
                self._line("plan", f"  {mark} {entry.get('content', '')}")

    def _permission(self, event: dict[str, Any]) -> None:
        call = event.get("toolCall") or {}
        title = call.get("title") or call.get("toolCallId") or "a tool call"
        decision = str(event.get("decision") or "cancelled")
        self._line("permission", f"[permission] {title}: {decision}")
        denied_by_default = self._permission_mode == "deny" and decision.startswith("reject")
        if denied_by_default and "permission" not in self._hinted:
            self._hinted.add("permission")
            self._note(
                "hint: permission requests are denied here (no terminal to ask on); "
                "--permission allow-reads or allow-all decides up front"
            )

    def elicitation_declined(self, request: Any) -> None:
        """``run`` declined the agent's question (an ``ElicitationRequest``): say what was asked
        and where it can be answered, one line."""
        what = {"form": "a form", "url": "consent to open a url"}.get(request.mode, "a question")
        self._note(
            f"the agent asked {what} ({request.about()}); declined: run answers no questions. "
            "To answer it use chat, or serve the conversation (acp-bridge serve) and attach a "
            "client that answers elicitations"
        )

    def _stream_decor(self, label: str, text: str) -> None:
        """Text streamed among the turn's structure (dim), under ``label`` once per run."""
        if not text:
            return
        if self._streaming != label:
            self._end_thought()
            self._start_line(self._decor)
            self._write(self._decor, self._paint("dim", label))
            self._in_thought = True
            self._streaming = label
        self._write(self._decor, self._paint("dim", text))

    def _turn_ended(self, event: dict[str, Any]) -> None:
        self._end_thought()
        self._end_line(self._text)
        self._text.flush()
        state = event.get("state")
        if state == "done":
            self._line("done", f"[done] {event.get('stopReason')}")
        else:
            self._line("permission", f"[{state}]")
            self._note(f"message {event['seq']} ended {state}")

    # -- lines and streams ------------------------------------------------------------------------

    def _remember(self, call_id: str, title: str) -> None:
        self._titles[call_id] = title
        self._titles.move_to_end(call_id)
        while len(self._titles) > _TITLES_KEPT:
            self._titles.popitem(last=False)

    def _line(self, style: str, text: str) -> None:
        self._end_thought()
        self._start_line(self._decor)
        self._write(self._decor, self._paint(style, text) + "\n")

    def _note(self, text: str) -> None:
        self._end_thought()
        self._end_line(self._text)
        self._text.flush()
        self._start_line(self._notes)
        print(f"acp-bridge: {text}", file=self._notes, flush=True)
        self._at_line_start[id(self._notes)] = True

    def _end_thought(self) -> None:
        if self._in_thought:
            self._in_thought = False
            self._streaming = ""
            self._end_line(self._decor)

    def _start_line(self, stream: TextIO) -> None:
        """Begin on a fresh line of ``stream`` (and of the text, when they share a screen)."""
        self._end_line(stream)
        if stream is not self._text and self._decor is self._text:
            self._end_line(self._text)

    def _end_line(self, stream: TextIO) -> None:
        if not self._at_line_start.get(id(stream), True):
            stream.write("\n")
            stream.flush()
            self._at_line_start[id(stream)] = True

    def _write(self, stream: TextIO, text: str) -> None:
        if not text:
            return
        stream.write(text)
        stream.flush()
        self._at_line_start[id(stream)] = text.endswith("\n")

    def _paint(self, style: str, text: str) -> str:
        if not self._color:
            return text
        return f"\x1b[{_COLORS[style]}m{text}\x1b[0m"


def _json_line(event: dict[str, Any]) -> str:
    """``event`` as one compact JSON line, UTF-8 as is. pydantic-core's encoder: about a tenth
    of ``json.dumps`` with options per call, which built an encoder for every event (a turn
    can stream tens of thousands). A non-finite number is ``null`` (JSON has no NaN)."""
    return to_json(event, inf_nan_mode="null", serialize_unknown=True).decode() + "\n"


def _started(event: dict[str, Any]) -> str:
    """``agent_started`` in words: pid, the agent's name and version, the protocol."""
    given = event.get("agentInfo")
    info: dict[str, Any] = given if isinstance(given, dict) else {}
    named = " ".join(str(info[key]) for key in ("name", "version") if info.get(key))
    about = f"{named}, " if named else ""
    return f"pid {event.get('pid')}, {about}ACP protocol {event.get('protocolVersion')}"
