"""``acp-bridge demo``: the whole thing on the built-in agent, offline, from any directory.

It starts ``python -m acp_bridge agent --mock-script`` (the reference agent on a scripted mock
model, so litellm's real streaming path runs with no network and no keys) under a supervised
conversation, in temporary directories, and walks through six steps, one narrated line each on
stderr (the agent's answers stream to stdout):

1. a streamed answer;
2. a tool call (a file write) with a permission decision;
3. a message typed during a turn, queued until that turn ends;
4. a cancel, drained within the grace window;
5. a crash of the agent, its restart with the session restored, and the conversation going on;
6. the usage summary, from the agent's ``usage_update`` notifications.

Each step checks what it saw; the exit status is 0 only if every step behaved, 4 if one did
not, 3 if the agent could not start (the ``agent`` extra missing, for instance).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import anyio

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_OK, EXIT_TURN_FAILED
from acp_bridge.core.condition import Condition
from acp_bridge.errors import AgentError, BridgeError
from acp_bridge.version import agent_extra_install

__all__ = ["demo_command", "run_demo"]

STEP_TIMEOUT_S: Final = 60.0
"""Generous: the first answer waits for litellm's import in the agent (seconds)."""
GRACE_S: Final = 3.0
STEPS: Final = 6


class StepFailed(Exception):
    """A step did not behave; the message says how."""


def _say(text: str) -> None:
    print(f"acp-bridge demo: {text}", file=sys.stderr, flush=True)


def demo_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    return run_demo()


def run_demo() -> int:
    if importlib.util.find_spec("litellm") is None:
        _say(
            "the built-in agent needs the agent extra (litellm); install it with "
            + agent_extra_install()
        )
        return EXIT_AGENT_FAILED
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="acp-bridge-demo-") as scratch:
        try:
            anyio.run(_demo, Path(scratch))
        except Exception as raised:
            exc = _leaf(raised)
            if isinstance(exc, StepFailed):
                _say(f"a step did not behave: {exc}")
                return EXIT_TURN_FAILED
            if isinstance(exc, AgentError):
                _say(f"the built-in agent failed: {exc}")
                return EXIT_AGENT_FAILED
            if isinstance(exc, BridgeError | TimeoutError):
                _say(f"a step did not finish: {exc or f'over {STEP_TIMEOUT_S:.0f} s'}")
                return EXIT_TURN_FAILED
            _say(f"the demo failed unexpectedly ({type(exc).__name__}: {exc}); this is a bug")
            return EXIT_TURN_FAILED
    _say(f"all {STEPS} steps behaved ({time.monotonic() - started:.1f} s)")
    return EXIT_OK


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _Events:
    """Every conversation event, kept in order; steps wait for the ones they need."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.mid_line = False
        self._changed = Condition()

    async def collect(self, stream: Any) -> None:
        async with stream:
            async for event in stream:
                self.seen.append(event)
                if event["event"] == "update":
                    self.mid_line = _stream_text(event["update"]) or self.mid_line
                elif event["event"] in ("turn_ended", "turn_failed") and self.mid_line:
                    print(flush=True)
                    self.mid_line = False
                self._changed.notify_all()

    async def wait(self, what: str, found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with anyio.fail_after(STEP_TIMEOUT_S):
            while True:
                for event in self.seen:
                    if found(event):
                        return event
                await self._changed.wait()
        raise AssertionError(what)  # pragma: no cover (fail_after raises first)

    async def end_of(self, seq: int) -> dict[str, Any]:
        return await self.wait(
            f"the end of message {seq}",
            lambda e: e["event"] in ("turn_ended", "turn_failed") and e.get("seq") == seq,
        )

    def updates(self, seq: int, kind: str) -> list[dict[str, Any]]:
        return [
            e["update"]
            for e in self.seen
            if e["event"] == "update"
            and e.get("seq") == seq
            and e["update"].get("sessionUpdate") == kind
        ]

    def text(self, seq: int) -> str:
        return "".join(
            u["content"].get("text", "") for u in self.updates(seq, "agent_message_chunk")
        )

    def index(self, found: Callable[[dict[str, Any]], bool]) -> int:
        return next(i for i, e in enumerate(self.seen) if found(e))


def _stream_text(update: dict[str, Any]) -> bool:
    """Show an answer chunk on stdout; True if something was written."""
    if update.get("sessionUpdate") != "agent_message_chunk":
        return False
    text = str(update.get("content", {}).get("text", ""))
    sys.stdout.write(text)
    sys.stdout.flush()
    return bool(text)


def _check(ok: bool, failure: str) -> None:
    if not ok:
        raise StepFailed(failure)


async def _demo(scratch: Path) -> None:
    from acp_bridge.agents.demo_script import DEMO_SCRIPT
    from acp_bridge.client.options import ClientOptions
    from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
    from acp_bridge.client.supervisor import open_supervised_agent
    from acp_bridge.client.turn import TurnPolicy
    from acp_bridge.conversation.opening import open_conversation
    from acp_bridge.conversation.store import QueueStore
    from acp_bridge.core.turn_machine import TurnTimings
    from acp_bridge.process.policy import RestartPolicy
    from acp_bridge.process.spec import AgentSpec
    from acp_bridge.wire.client_methods import RequestPermissionRequest

    project = scratch / "project"
    project.mkdir()
    script = scratch / "mock-script.json"
    script.write_text(json.dumps(DEMO_SCRIPT), encoding="utf-8")
    argv = [
        sys.executable,
        "-m",
        "acp_bridge",
        "agent",
        "--mock-script",
        str(script),
        "--history",
        str(scratch / "agent-history.db"),
    ]
    decisions: list[tuple[str, str]] = []

    async def ask(request: RequestPermissionRequest) -> str | None:
        option = next(o for o in request.options if o.kind == "allow_once")
        decisions.append((request.tool_call.title or "?", str(option.kind)))
        return option.option_id

    options = ClientOptions(
        permission=PermissionPolicy(PermissionMode.ASK, ask),
        allow_fs_read=True,
        allow_fs_write=True,
        restart=RestartPolicy(initial_delay_s=0.05, max_delay_s=0.5, max_restarts=2),
        cancel_grace_s=GRACE_S,
        startup_timeout_s=STEP_TIMEOUT_S,
        base_env=dict(os.environ),
    )
    policy = TurnPolicy(timings=TurnTimings(cancel_grace_s=GRACE_S))
    _say(
        "starting the built-in agent offline: acp-bridge agent --mock-script (no network, no keys)"
    )
    store = QueueStore.open(scratch / "store.db")
    record = store.create_conversation(
        agent={"argv": argv, "name": "built-in"},
        cwd=str(project),
        mcp_servers=[],
        config={},
        now=time.time(),
    )
    spec = AgentSpec(argv, name="built-in agent", cwd=project)
    events = _Events()
    async with open_supervised_agent(spec, options) as agent, anyio.create_task_group() as tg:
        async with open_conversation(store, agent, record, policy=policy) as conversation:
            tg.start_soon(events.collect, conversation.subscribe(replay=True))
            started = await events.wait(
                "agent_started", lambda e: e["event"] == "agent_started"
            )
            info = started.get("agentInfo") or {}
            _say(
                f"agent ready: {info.get('name', '?')} {info.get('version', '')}, pid "
                f"{started.get('pid')}, session {conversation.session.id[:8]}"
            )
            steps = _Steps(conversation, events, project, decisions)
            for step in (
                steps.streamed_answer,
                steps.tool_call,
                steps.queued_message,
                steps.cancel,
                steps.crash_and_restore,
                steps.usage,
            ):
                await step()
        tg.cancel_scope.cancel()
    store.close()
    if events.mid_line:
        print(flush=True)


class _Steps:
    def __init__(
        self, conversation: Any, events: _Events, project: Path, decisions: list[tuple[str, str]]
    ) -> None:
        self.conversation = conversation
        self.events = events
        self.project = project
        self.decisions = decisions

    async def _turn(self, text: str) -> tuple[int, dict[str, Any]]:
        seq = await self.conversation.send(text)
        return seq, await self.events.end_of(seq)

    async def streamed_answer(self) -> None:
        started = time.monotonic()
        seq, end = await self._turn("Hello! Who are you?")
        chunks = self.events.updates(seq, "agent_message_chunk")
        _check(end.get("stopReason") == "end_turn", f"the first turn ended {end}")
        _check(len(chunks) > 5, f"the answer came in {len(chunks)} chunk(s), not streamed")
        thoughts = len(self.events.updates(seq, "agent_thought_chunk"))
        _say(
            f"1/{STEPS} streamed answer: {len(chunks)} chunks (+{thoughts} thought chunks), "
            f"end_turn after {time.monotonic() - started:.1f} s (the agent imported litellm "
            "meanwhile)"
        )

    async def tool_call(self) -> None:
        seq, end = await self._turn("Please write my notes to notes.md")
        _check(end.get("stopReason") == "end_turn", f"the tool turn ended {end}")
        calls = self.events.updates(seq, "tool_call")
        finals = [u.get("status") for u in self.events.updates(seq, "tool_call_update")]
        _check(bool(calls) and finals[-1:] == ["completed"], f"tool call states {finals}")
        _check(bool(self.decisions), "no permission was asked before the write")
        notes = self.project / "notes.md"
        _check(notes.is_file(), "notes.md was not written")
        title, kind = self.decisions[-1]
        _say(
            f"2/{STEPS} tool call: '{title}' ({calls[0].get('kind')}) asked permission, the "
            f"demo chose {kind}; the client wrote {notes.name} ({notes.stat().st_size} bytes), "
            f"the call ended {finals[-1]}"
        )

    async def queued_message(self) -> None:
        story = await self.conversation.send("Tell me a story, please")
        await self.events.wait(
            "the story's first words",
            lambda e: e["event"] == "update" and e.get("seq") == story,
        )
        follow = await self.conversation.send("And a short follow-up question")
        queued_event = await self.events.wait(
            "the follow-up queued", lambda e: e["event"] == "queued" and e.get("seq") == follow
        )
        story_end = await self.events.end_of(story)
        follow_end = await self.events.end_of(follow)
        follow_start = await self.events.wait(
            "the follow-up started",
            lambda e: e["event"] == "turn_started" and e.get("seq") == follow,
        )
        queued, ended_at, started_at = (
            self.events.index(lambda e, wanted=wanted: e is wanted)  # type: ignore[misc]
            for wanted in (queued_event, story_end, follow_start)
        )
        _check(queued < ended_at < started_at, "the follow-up did not wait for the story")
        _check(
            story_end.get("stopReason") == follow_end.get("stopReason") == "end_turn",
            f"the queued turns ended {story_end} / {follow_end}",
        )
        _say(
            f"3/{STEPS} typed during a turn: message {follow} was queued while message {story} "
            f"streamed, and was prompted only after it ended ({story_end['duration_ms']:.0f} ms)"
        )

    async def cancel(self) -> None:
        seq = await self.conversation.send("Think slowly about everything")
        await self.events.wait(
            "the slow answer's first words",
            lambda e: e["event"] == "update" and e.get("seq") == seq,
        )
        asked = time.monotonic()
        await self.conversation.stop()
        end = await self.events.end_of(seq)
        drained_ms = (time.monotonic() - asked) * 1000
        await self.conversation.resume()
        _check(end.get("stopReason") == "cancelled", f"the cancelled turn ended {end}")
        _check(drained_ms < GRACE_S * 1000, f"the cancel took {drained_ms:.0f} ms")
        _say(
            f"4/{STEPS} cancel: the turn ended cancelled {drained_ms:.0f} ms after the stop, "
            f"within the {GRACE_S:.0f} s grace window (no quarantine needed)"
        )

    async def crash_and_restore(self) -> None:
        session_id = self.conversation.session.id
        crashed = await self.conversation.send("Now crash, please")
        failed = await self.events.end_of(crashed)
        exited = await self.events.wait("agent_exited", lambda e: e["event"] == "agent_exited")
        restored = await self.events.wait(
            "session_restored", lambda e: e["event"] == "session_restored"
        )
        _check(
            failed["event"] == "turn_failed" and failed.get("recoverable") is True,
            f"the crashed turn ended {failed}",
        )
        seq, end = await self._turn("Are you still there?")
        answer = self.events.text(seq)
        _check(end.get("stopReason") == "end_turn", f"the turn after the restart ended {end}")
        _check(restored.get("sessionId") == session_id, "the session was not the same")
        _check("still here" in answer and "messages" in answer, f"answer: {answer!r}")
        _say(
            f"5/{STEPS} crash: the agent exited with status {exited.get('returncode')} mid-turn "
            f"(message {crashed} failed, recoverable, not re-sent); it restarted, session "
            f"{session_id[:8]} came back through session/{restored.get('how')}, and the "
            f'conversation went on: "{answer.strip()}"'
        )

    async def usage(self) -> None:
        updates = [
            e["update"]
            for e in self.events.seen
            if e["event"] == "update" and e["update"].get("sessionUpdate") == "usage_update"
        ]
        _check(bool(updates), "the agent sent no usage_update")
        last = updates[-1]
        cost = last.get("cost") or {}
        layer = getattr(self.conversation, "usage", None)
        summary = getattr(layer, "summary", None)
        extra = f"; conversation layer: {summary()}" if callable(summary) else ""
        _say(
            f"6/{STEPS} usage: {len(updates)} model requests reported; context "
            f"{last['used']:,} of {last['size']:,} tokens; session cost "
            f"{cost.get('amount', 0):.6f} {cost.get('currency', 'USD')} at gpt-4o-mini prices "
            f"(from the agent's usage_update){extra}"
        )
