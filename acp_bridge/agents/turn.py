"""One prompt turn: model -> tools -> model, until the model stops or a bound is reached.

The turn runs in a cancel scope that ``session/cancel`` cancels; whatever it is doing then (a
streaming model request, a permission question, a terminal command) stops at once and the turn
answers ``cancelled``. Text streamed before the cancel is kept in the history, and a tool call
left without a result gets a "cancelled" result, so the next request to the provider is valid.

History: the user message is stored when the turn starts, everything else when it ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from acp_bridge.agents.config import AgentConfig
from acp_bridge.agents.model import ModelClient, ModelReply, TokenUsage
from acp_bridge.agents.prompt import prompt_text
from acp_bridge.agents.sessions import AgentSession
from acp_bridge.agents.store import EntryKind, HistoryStore
from acp_bridge.agents.tool_runner import ToolContext, TurnCancelled, run_tool
from acp_bridge.agents.tools import ToolSpec, available_tools
from acp_bridge.agents.usage import UsageMeter, add_usage, prompt_usage
from acp_bridge.wire.initialize import ClientCapabilities

__all__ = ["TurnDeps", "run_turn"]

TITLE_CHARS = 60


@dataclass
class TurnDeps:
    config: AgentConfig
    store: HistoryStore
    models: ModelClient
    capabilities: ClientCapabilities
    request: Callable[[str, dict[str, Any]], Awaitable[Any]]
    notify: Callable[[str, dict[str, Any]], Awaitable[None]]


async def run_turn(
    deps: TurnDeps, session: AgentSession, blocks: list[dict[str, Any]], *, cancelled: bool = False
) -> dict[str, Any]:
    """Run one prompt turn; ``cancelled``: a cancel came before the turn started (the prompt is
    still recorded, and answered ``cancelled`` at once)."""
    text = prompt_text(blocks)
    user = {"role": "user", "content": text}
    session.messages.append(user)
    first = deps.store.get(session.id)
    opening: list[tuple[EntryKind, dict[str, Any]]] = [("message", user)]
    opening += [("update", {"sessionUpdate": "user_message_chunk", "content": b}) for b in blocks]
    deps.store.append(session.id, opening)
    if first is not None and first.title is None and text.strip():
        deps.store.update(session.id, title=" ".join(text.split())[:TITLE_CHARS])
    turn = _Turn(deps, session)
    with anyio.CancelScope() as scope:
        session.turn = scope
        if cancelled:
            scope.cancel()
        try:
            stop = await turn.loop()
        except TurnCancelled:
            stop = "cancelled"
        finally:
            session.turn = None
            turn.save()  # a provider error too keeps what was said
    if scope.cancelled_caught:
        stop = "cancelled"
    return {"stopReason": stop, "usage": prompt_usage(turn.totals)}


class _Turn:
    def __init__(self, deps: TurnDeps, session: AgentSession) -> None:
        self.deps = deps
        self.session = session
        self.totals = TokenUsage()
        self.entries: list[tuple[EntryKind, dict[str, Any]]] = []
        self.streaming: ModelReply | None = None
        self.message_id = ""
        self.context = ToolContext(
            session.id,
            session.cwd,
            deps.request,
            lambda update: deps.notify(session.id, update),
            session.always_allowed,
            can_read=deps.capabilities.fs.read_text_file,
            roots=session.roots,
        )

    async def loop(self) -> str:
        deps, session = self.deps, self.session
        meter = UsageMeter(await deps.models.module())
        for _ in range(deps.config.max_turn_requests):
            tools = available_tools(deps.capabilities, session.mode)
            self.streaming = ModelReply()
            self.message_id = uuid.uuid4().hex
            reply = await deps.models.complete(
                session.model,
                [system_message(session, tools), *session.messages],
                [tool.schema() for tool in tools],
                self._on_text,
                self._on_thought,
            )
            self.streaming = None
            self._keep_reply(reply)
            if reply.usage is not None:
                await self._account(meter, reply.usage)
            if not reply.tool_calls:
                return "max_tokens" if reply.finish_reason == "length" else "end_turn"
            offered = {tool.name for tool in tools}
            for call in reply.tool_calls:
                outcome = await run_tool(self.context, call.id, call.name, call.arguments, offered)
                self._keep(
                    "message", {"role": "tool", "tool_call_id": call.id, "content": outcome.result}
                )
                self.entries.append(("update", outcome.replay))
        return "max_turn_requests"

    async def _on_text(self, text: str) -> None:
        assert self.streaming is not None
        self.streaming.text += text
        await self.deps.notify(
            self.session.id, _chunk("agent_message_chunk", text, self.message_id)
        )

    async def _on_thought(self, text: str) -> None:
        assert self.streaming is not None
        self.streaming.thought += text
        await self.deps.notify(
            self.session.id, _chunk("agent_thought_chunk", text, self.message_id)
        )

    async def _account(self, meter: UsageMeter, usage: TokenUsage) -> None:
        add_usage(self.totals, usage)
        cost = meter.cost(self.session.model, usage)
        if cost is not None:
            self.session.cost = (self.session.cost or 0.0) + cost
        update = meter.update(self.session.model, usage, self.session.cost)
        if update is not None:
            await self.deps.notify(self.session.id, update)

    def _keep(self, kind: EntryKind, body: dict[str, Any]) -> None:
        if kind == "message":
            self.session.messages.append(body)
        self.entries.append((kind, body))

    def _keep_reply(self, reply: ModelReply) -> None:
        if reply.thought:
            self.entries.append(
                ("update", _chunk("agent_thought_chunk", reply.thought, self.message_id))
            )
        if reply.text:
            self.entries.append(
                ("update", _chunk("agent_message_chunk", reply.text, self.message_id))
            )
        if reply.text or reply.tool_calls:
            self._keep("message", reply.as_message())

    def save(self) -> None:
        if self.streaming is not None:  # cut mid-stream: keep what the user saw
            partial, self.streaming = self.streaming, None
            partial.tool_calls = []
            self._keep_reply(partial)
        self._close_open_tool_calls()
        self.deps.store.append(self.session.id, self.entries)
        self.entries = []
        if self.session.cost is not None:
            self.deps.store.update(self.session.id, cost=self.session.cost)

    def _close_open_tool_calls(self) -> None:
        answered = {m.get("tool_call_id") for m in self.session.messages if m.get("role") == "tool"}
        unanswered: list[str] = []
        for message in reversed(self.session.messages):
            if message.get("role") == "user":
                break
            calls = message.get("tool_calls") or ()
            unanswered.extend(call["id"] for call in calls if call["id"] not in answered)
        for call_id in unanswered:
            result = {"role": "tool", "tool_call_id": call_id, "content": "cancelled by the user"}
            self._keep("message", result)


def system_message(session: AgentSession, tools: list[ToolSpec]) -> dict[str, Any]:
    """What the model is told about its situation (not stored: it follows the mode and tools)."""
    names = ", ".join(tool.name for tool in tools) or "none"
    mode = (
        "ask: you may only read and look; if a change is needed, describe it"
        if session.mode == "ask"
        else "code: you may change files and run commands; the user approves each one"
    )
    return {
        "role": "system",
        "content": (
            "You are a careful coding agent working in the project at "
            f"{session.cwd}. Paths are relative to it{_also(session)}. Mode {mode}. "
            f"Tools: {names}. Use tools to find facts instead of guessing, keep answers short, "
            "and say what you changed."
        ),
    }


def _also(session: AgentSession) -> str:
    others = ", ".join(session.additional_directories)
    return f"; you may also use {others}" if others else ""


def _chunk(kind: str, text: str, message_id: str) -> dict[str, Any]:
    return {
        "sessionUpdate": kind,
        "content": {"type": "text", "text": text},
        "messageId": message_id,
    }
