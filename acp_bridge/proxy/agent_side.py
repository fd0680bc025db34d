"""The proxy's side toward the agent: what an agent process writes, routed.

The hot path: a read's plain notifications (a turn's ``session/update`` lines, recognised by
their prefix and never parsed) go to the editor together, in one write; anything else first
flushes what was gathered, so the order is kept. Responses end the editor's requests (a
prompt's answer lets the next queued prompt go), answer the bridge's own requests, or are
dropped when nobody waits for them. The agent's requests reach the editor under an id the
proxy owns (see :mod:`.routing`), and the agent's ``$/cancel_request`` for one of them is
translated to that id. An error answer with a null id (the agent could not read a line) goes
to the editor: only the editor's lines can be unreadable. A generation being restored has its
``session/update`` lines swallowed (a ``session/load`` replay); a fenced one has nothing
forwarded.

Backpressure: before every read the reader waits for room toward the editor
(:meth:`~.editor_link.EditorLink.wait_room`), so while the editor does not read, the agent is
not read either: at most the bound plus one read wait for the editor.
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
from acp_bridge.proxy.frames import UPDATE_PREFIXES, Frame, FrameKind, parse_line, with_id
from acp_bridge.proxy.generation import RelayGeneration
from acp_bridge.proxy.lines import BatchLineReader
from acp_bridge.proxy.registry import EditorSessions
from acp_bridge.proxy.routing import CANCEL_REQUEST, AgentRequests, EditorRequests
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
        editor = self._editor
        while True:
            await editor.wait_room()  # the editor is behind: stop reading the agent
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
            # A line cut short by the agent's death must be parsed (and is then skipped).
            await self._route(gen, lines, trusted=not reader.unterminated)
            del lines  # not held while waiting for room: what waits is in the writer, counted

    async def _route(self, gen: RelayGeneration, lines: list[bytes], *, trusted: bool) -> None:
        """The lines of one read, forwarded or handled in order.

        The hot path: plain notifications (a turn's updates) of one read are forwarded
        together, in one write; anything else first flushes what is gathered, so the order
        is kept."""
        gathered: list[bytes] = []
        recording = self._editor.recorder is not None
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
            if frame.method == CANCEL_REQUEST:  # the agent gives up one of its own requests
                asked = frame.params.get("requestId")
                editor_id = self._agent_requests.editor_id(gen.number, asked)
                if editor_id is not None:
                    await self._editor.send(answers.cancel_request(editor_id))
                return
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
            await self._editor.forward(gen, with_id(frame, pending.editor_id))
        elif kind is FrameKind.BATCH:
            await self._editor.forward(gen, frame.line)
        else:
            log.warning("%s wrote a line that is not a JSON-RPC message; skipped", self._agent_name)

    async def _agent_answered(self, gen: RelayGeneration, frame: Frame) -> None:
        request = self._editor_requests.take(frame.key)
        if request is None:
            if frame.id is None:
                # An error about a line the agent could not read (-32700, -32600): ours are
                # always valid requests, so it is about one of the editor's.
                await self._editor.forward(gen, frame.line)
                return
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
