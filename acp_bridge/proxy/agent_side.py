"""The proxy's side toward the agent: what an agent process writes, routed.

The hot path: a read's plain notifications (a turn's ``session/update`` lines, recognised by
their prefix and never parsed) go to the editor together, in one write; anything else first
flushes what was gathered, so the order is kept. Responses end the editor's requests (a
prompt's answer lets the next queued prompt go), answer the bridge's own requests, or are
dropped when nobody waits for them; the agent's requests reach the editor (under a fresh id
when theirs is still in use there). A generation being restored has its ``session/update``
lines swallowed (a ``session/load`` replay); a fenced one has nothing forwarded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from acp_bridge.errors import ConnectionClosedError, FramingError, ResourceClosedError
from acp_bridge.proxy import answers
from acp_bridge.proxy.editor_link import EditorLink
from acp_bridge.proxy.frames import UPDATE_PREFIXES, Frame, FrameKind, parse_line
from acp_bridge.proxy.generation import RelayGeneration
from acp_bridge.proxy.lines import BatchLineReader
from acp_bridge.proxy.registry import EditorSessions
from acp_bridge.proxy.routing import AgentRequests, EditorRequests
from acp_bridge.proxy.turns import PromptTurns, TurnsAction

__all__ = ["AgentSide"]

log = logging.getLogger(__name__)


class AgentSide:
    def __init__(
        self,
        agent_name: str,
        editor: EditorLink,
        turns: PromptTurns,
        registry: EditorSessions,
        editor_requests: EditorRequests,
        agent_requests: AgentRequests,
        *,
        perform: Callable[[Sequence[TurnsAction]], Awaitable[None]],
        max_line_bytes: int,
    ) -> None:
        self._agent_name = agent_name
        self._editor = editor
        self._turns = turns
        self._registry = registry
        self._editor_requests = editor_requests
        self._agent_requests = agent_requests
        self._perform = perform
        self._max_line_bytes = max_line_bytes

    async def read(self, gen: RelayGeneration) -> None:
        reader = BatchLineReader(
            gen.process.stdout,
            max_line_bytes=self._max_line_bytes,
            coalesce_updates=self._editor.recorder is None,  # a recording sees every line
        )
        while True:
            try:
                lines = await reader.receive_lines()
            except anyio.EndOfStream:
                gen.end("it closed its stdout")
                return
            except FramingError as exc:
                gen.end(f"it wrote a line over the size limit ({exc})")
                return
            except (ConnectionClosedError, ResourceClosedError):
                gen.end("its stdout broke")
                return
            # The hot path: plain notifications (a turn's updates) of one read are forwarded
            # together, in one write; anything else first flushes what is gathered, so the
            # order is kept.
            gathered: list[bytes] = []
            recording = self._editor.recorder is not None
            # A line cut short by the agent's death must be parsed (and is then skipped).
            trusted = not reader.unterminated
            for line in lines:
                if trusted and line.startswith(UPDATE_PREFIXES):
                    if recording:
                        self._editor.record("agent->bridge", Frame(line, FrameKind.NOTIFICATION))
                    if gen.alive and not gen.restoring:  # restoring: a load's replay, swallowed
                        gathered.append(line)
                    continue
                frame = parse_line(line, by_prefix=trusted)
                self._editor.record("agent->bridge", frame)
                if not gen.alive:
                    continue
                if frame.kind is FrameKind.NOTIFICATION and not gen.restoring:
                    gathered.append(line)
                    continue
                if gathered:
                    await self._editor.forward_batch(gen, gathered)
                    gathered = []
                await self._from_agent(gen, frame)
            if gathered:
                await self._editor.forward_batch(gen, gathered)

    async def _from_agent(self, gen: RelayGeneration, frame: Frame) -> None:
        kind = frame.kind
        if kind is FrameKind.NOTIFICATION:
            if gen.restoring and frame.method == "session/update":
                return  # a session/load replay: the editor has this history already
            await self._editor.forward(gen, frame.line)
        elif kind is FrameKind.RESPONSE:
            if not gen.take_own_reply(frame):
                await self._agent_answered(gen, frame)
        elif kind is FrameKind.REQUEST:
            assert frame.method is not None
            if self._agent_requests.is_full:
                message = "too many requests waiting for the editor"
                await gen.send(answers.error_answer(frame.id, answers.INTERNAL_ERROR, message))
                return
            pending = self._agent_requests.add(gen.number, frame.id, frame.method)
            line = frame.line
            if pending.rewritten:
                assert frame.message is not None
                line = _dumps({**frame.message, "id": pending.editor_id})
            await self._editor.forward(gen, line)
        elif kind is FrameKind.BATCH:
            await self._editor.forward(gen, frame.line)
        else:
            log.warning("%s wrote a line that is not a JSON-RPC message; skipped", self._agent_name)

    async def _agent_answered(self, gen: RelayGeneration, frame: Frame) -> None:
        request = self._editor_requests.take(frame.key)
        if request is None:
            log.info("%s answered an id nobody is waiting for; dropped", self._agent_name)
            return
        actions: list[TurnsAction] = []
        if request.method == "session/prompt" and request.session_id is not None:
            stop = None if frame.is_error else (frame.stop_reason or "")
            actions = self._turns.answered(
                request.session_id, frame.key, stop, anyio.current_time()
            )
        elif not frame.is_error:
            registry = self._registry
            registry.answered(request.method, request.params, request.session_id, frame.result)
        await self._editor.forward(gen, frame.line)
        await self._perform(actions)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
