"""The proxy's I/O: editor <-> agent relay with restarts, prompt queueing and cancel grace.

Tasks (one task group): the editor reader and its dispatcher, the editor writer
(:mod:`.editor_link`), the core supervisor with the proxy's kind of generation
(:mod:`.supervision`: one agent process at a time, a :class:`~.generation.RelayGeneration`
with its writer, exit watcher and reader, :mod:`.agent_side`), and a timer per armed cancel
grace (:mod:`.prompt_flow`). Every decision is taken by a pure part
(:class:`~acp_bridge.core.lifecycle.AgentLifecycle` and the restart policy for the agent,
:class:`~.turns.PromptTurns` for prompts, :mod:`.routing` for ids, :mod:`.registry` for
sessions); this module performs it (the prompts' decisions through :mod:`.prompt_flow`). State
changes happen between awaits, so no decision sees a half-made change. While an agent
restarts, the editor's messages wait in a bounded backlog (:mod:`.backlog`; the reader goes on
reading up to its bound, so an EOF is seen at once).

Lines are forwarded as they came; see :mod:`.frames` for what is parsed. Every buffer is bounded
in bytes, ``max_buffer_bytes`` per direction (:class:`~acp_bridge.rpc.framing.ByteBudget`): what
the editor sent and the agent has not taken (the backlog and the agent's writer) is one budget,
what the agent sent and the editor has not taken (the editor's writer) another. Each side's
reader waits for room in its direction's budget before every read, so a side that stops reading
slows the other side down instead of growing memory: at most the bound plus one line waits.
Prompts queued behind a running turn have a bound of the same size (:mod:`.turns`).

Shutdown: the agent tree is stopped, then the editor gets our last lines within
``_FLUSH_BOUND_S``; past it they are dropped and its stream closed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup

from acp_bridge.core.restore_plan import RestoreBudget
from acp_bridge.errors import ConnectionClosedError, FramingError, ResourceClosedError
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from acp_bridge.proxy import answers
from acp_bridge.proxy.agent_side import AgentSide
from acp_bridge.proxy.backlog import EditorBacklog
from acp_bridge.proxy.editor_link import EditorLink
from acp_bridge.proxy.frames import Frame, FrameKind, IdKey, id_key, parse_line, with_id
from acp_bridge.proxy.generation import RelayGeneration
from acp_bridge.proxy.prompt_flow import PromptFlow
from acp_bridge.proxy.recorder import Recorder
from acp_bridge.proxy.registry import SETTINGS_METHODS, EditorSessions
from acp_bridge.proxy.restore import restore_sessions
from acp_bridge.proxy.routing import (
    MAX_IN_FLIGHT,
    AgentRequests,
    EditorRequests,
    PendingEditorRequest,
)
from acp_bridge.proxy.supervision import AgentGone, RelayLifetime
from acp_bridge.proxy.turns import PromptTurns, QueuedPrompt
from acp_bridge.rpc.framing import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_QUEUED_BYTES,
    ByteBudget,
    LineReader,
)

__all__ = ["ProxyOptions", "ProxyRelay"]

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_AGENT_GONE = 3
_FLUSH_BOUND_S = 2.0
"""How long the editor gets to take our last lines at shutdown."""
_RECORDED_PARAMS = (
    frozenset(
        {
            "initialize",
            "authenticate",
            "session/new",
            "session/fork",
            "session/load",
            "session/resume",
        }
    )
    | SETTINGS_METHODS
)
_FORGETTING = frozenset({"session/close", "session/delete"})


@dataclass(frozen=True)
class ProxyOptions:
    grace_s: float = 5.0
    queueing: bool = True
    startup_timeout_s: float = 60.0
    """Bound on re-initializing a restarted agent (a slower one counts as a crash)."""
    restore: RestoreBudget = field(default_factory=RestoreBudget)
    """Each session's restore budget and how many restore at once (the core's restore plan)."""
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    max_in_flight: int = MAX_IN_FLIGHT
    """Requests in flight each way (editor to agent, agent to editor); past it a request is
    answered at once with an error instead of being forwarded."""
    max_buffer_bytes: int = DEFAULT_MAX_QUEUED_BYTES
    """Bytes read from one side that may wait for the other, per direction; at the bound the
    proxy stops reading the side that is ahead (one line always passes). Prompts queued
    behind running turns have a bound of this size too (one more is refused)."""


class ProxyRelay:
    def __init__(
        self,
        spec: AgentSpec,
        editor_in: ByteReceiveStream,
        editor_out: ByteSendStream,
        *,
        options: ProxyOptions | None = None,
        recorder: Recorder | None = None,
        base_env: Mapping[str, str] | None = None,
        stderr_forward: Callable[[str], None] | None = None,
    ) -> None:
        self._spec = spec
        self._options = options or ProxyOptions()
        self._editor_in = editor_in
        max_buffer_bytes = self._options.max_buffer_bytes
        self._editor = EditorLink(
            editor_out, recorder, self.stop, max_queued_bytes=max_buffer_bytes
        )
        self._toward_agent = ByteBudget(max_buffer_bytes)
        """What the editor sent and the agent has not taken: the backlog and the writers."""
        self._agents = RelayLifetime(
            spec,
            self._options.policy,
            self,
            base_env=base_env,
            stderr_forward=stderr_forward,
            budget=self._toward_agent,
        )
        self._registry = EditorSessions()
        self._turns = PromptTurns(
            self._options.grace_s,
            queueing=self._options.queueing,
            max_queued_bytes=max_buffer_bytes,
        )
        self._editor_requests = EditorRequests(self._options.max_in_flight)
        self._agent_requests = AgentRequests(self._options.max_in_flight)
        self._prompts = PromptFlow(
            spec.name,
            self._agents,
            self._editor,
            self._turns,
            self._registry,
            self._editor_requests,
            grace_s=self._options.grace_s,
            take_cut=self._take_cut,
        )
        self._agent_side = AgentSide(
            spec.name,
            self._editor,
            self._turns,
            self._registry,
            self._editor_requests,
            self._agent_requests,
            perform=self._prompts.perform,
            max_line_bytes=self._options.max_line_bytes,
        )
        self._cut: list[PendingEditorRequest] = []
        self._held: Frame | None = None
        self._backlog = EditorBacklog(self._toward_agent)
        self._main: TaskGroup | None = None
        self._stopping = False
        self.exit_code = EXIT_OK
        self.failure: str | None = None
        """Why the proxy gave up (the agent could not be started or is gone for good)."""

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> int:
        """Relay until the editor closes stdin, :meth:`stop` is called, or the agent is gone
        for good; the agent tree is stopped before this returns."""
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._editor.run)
            try:
                async with anyio.create_task_group() as main:
                    self._main = self._prompts.task_group = main
                    main.start_soon(self._agents.run)
                    main.start_soon(self._read_editor)
            finally:
                self._stopping = True
                self._agents.shutdown()
                self._editor.close()  # its run() returns once the queue is written
                outer.start_soon(self._editor.flush, _FLUSH_BOUND_S)
        return self.exit_code

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Shut down gracefully (a signal, the editor's EOF): the agent tree is stopped."""
        self._stopping = True
        self._agents.changed.notify_all()
        if self._main is not None:
            self._main.cancel_scope.cancel()

    # -- the editor side ---------------------------------------------------------------------

    def kill_now(self) -> None:
        """A second signal: SIGKILL the agent's tree now instead of waiting for it."""
        self.stop()
        gen = self._agents.generation
        if gen is not None:
            gen.process.kill_now()

    async def _read_editor(self) -> None:
        """Read the editor until EOF. Messages go through a bounded backlog to the dispatcher,
        which waits while the agent restarts; the reader goes on reading meanwhile, so the
        editor's EOF is seen at once, up to the bound: it waits for room toward the agent
        before every read. Responses (to the agent's requests) skip the backlog."""
        # The agent is spawned before the editor is read: a command that cannot start is
        # reported as such (exit 3), even to an editor that closes at once.
        await self._agents.wait_started()
        if self._stopping:
            return
        assert self._main is not None
        backlog = self._backlog
        self._main.start_soon(self._dispatch_editor)
        reader = LineReader(self._editor_in, max_line_bytes=self._options.max_line_bytes)
        room = self._toward_agent
        try:
            while True:
                await room.wait_room()  # at the bound: stop reading the editor
                try:
                    line = await reader.receive_line()
                except anyio.EndOfStream:
                    log.info("the editor closed the connection; stopping the agent")
                    break
                except FramingError as exc:
                    log.error("the editor sent a line over the size limit (%s); stopping", exc)
                    break
                except (ConnectionClosedError, ResourceClosedError):
                    break
                frame = parse_line(line)
                self._editor.record("editor->bridge", frame)
                if frame.kind is FrameKind.RESPONSE:
                    await self._editor_answered(frame)
                elif self._held is None and backlog.is_empty and self._agents.is_ready:
                    await self._dispatch(frame)  # nothing waits: no hop through the backlog
                else:
                    await backlog.put(frame)
                del line, frame  # not held while waiting for room: what waits is counted
        finally:
            backlog.close()
        self.stop()

    async def _dispatch_editor(self) -> None:
        backlog = self._backlog
        while True:
            try:
                frame = await backlog.next()
            except anyio.EndOfStream:
                return
            try:
                await self._dispatch(frame)
            finally:
                backlog.done(frame)

    async def _dispatch(self, frame: Frame) -> None:
        self._held = frame  # answered by a give-up that comes while it waits
        try:
            await self._from_editor(frame)
        except AgentGone:
            if frame.kind is FrameKind.REQUEST and not self._stopping:
                await self._answer_gone(frame.id)
        finally:
            self._held = None

    async def _from_editor(self, frame: Frame) -> None:
        if frame.kind is FrameKind.RESPONSE:
            await self._editor_answered(frame)
            return
        gen = await self._agents.ready()
        # Checked once the agent is ready: the restore just finished may have lost it.
        session_id = frame.session_id
        lost = self._registry.lost_reason(session_id)
        if lost is not None and frame.method not in ("session/load", "session/resume"):
            if frame.kind is FrameKind.REQUEST:
                assert session_id is not None
                await self._editor.send(answers.lost_session_error(frame.id, session_id, lost))
            return  # a notification about a lost session has nobody to go to
        answerable = frame.kind is FrameKind.REQUEST or (
            frame.kind is FrameKind.INVALID and frame.message is not None and "id" in frame.message
        )
        if answerable and self._in_flight(frame.key):
            await self._editor.send(answers.duplicate_id_error(frame.id))
            return
        if frame.kind is not FrameKind.REQUEST:
            if frame.method == "session/cancel" and session_id is not None:
                await self._prompts.cancel(gen, session_id, frame.line)
                return
            if answerable:  # a malformed request: the agent's error answer goes back to it
                self._editor_requests.add(PendingEditorRequest(frame.id, "", None, gen.number, {}))
            # notifications, batches, invalid lines: the agent answers those as it likes
            await self._to_agent(gen, frame.line, valid=frame.kind is not FrameKind.INVALID)
            return
        assert frame.method is not None
        if self._editor_requests.is_full:
            message = (
                f"too many requests in flight: {self._options.max_in_flight} are waiting for "
                f"{self._name}'s answers (proxy --max-in-flight); send this again once some "
                "are answered"
            )
            await self._editor.send(answers.error_answer(frame.id, answers.INTERNAL_ERROR, message))
            return
        if frame.method == "session/prompt" and session_id is not None:
            await self._prompts.prompt(QueuedPrompt(session_id, frame.id, frame.line))
            return
        params = frame.params if frame.method in _RECORDED_PARAMS | _FORGETTING else {}
        self._editor_requests.add(
            PendingEditorRequest(frame.id, frame.method, session_id, gen.number, params)
        )
        await self._to_agent(gen, frame.line)

    async def _editor_answered(self, frame: Frame) -> None:
        key = frame.key
        request = self._agent_requests.take(key)
        gen = self._agents.generation
        if request is None:
            if self._agent_requests.is_orphan(key):
                log.info("dropped the editor's late answer to a request of a stopped agent")
            else:
                log.warning("dropped the editor's answer to id %s: no request has it", frame.id)
            return
        if gen is None or gen.number != request.generation:
            return  # asked by a process that is gone since (its orphaning raced this answer)
        await self._to_agent(gen, with_id(frame, request.agent_id))

    def _in_flight(self, key: IdKey) -> bool:
        """An editor request with this id is not answered yet (forwarded, queued, or cut by an
        exit and waiting for the restore)."""
        return (
            key in self._editor_requests
            or self._turns.holds(key)
            or any(id_key(request.id) == key for request in self._cut)
        )

    # -- the agent side ----------------------------------------------------------------------

    async def read_agent(self, gen: RelayGeneration) -> None:
        await self._agent_side.read(gen)

    # -- the supervisor's steps (RelayHost) ---------------------------------------------

    async def restore(self, gen: RelayGeneration) -> list[str]:
        def restored(session_id: str, method: str) -> None:
            self.event({"event": "session_restored", "sessionId": session_id, "how": method})

        return await restore_sessions(
            gen,
            self._registry,
            startup_timeout_s=self._options.startup_timeout_s,
            budget=self._options.restore,
            name=self._name,
            restored=restored,
            waiting=lambda session_id: self._turns.queued(session_id) > 0,
        )

    async def generation_ready(self, gen: RelayGeneration, lost: list[str]) -> None:
        if gen.number > 1:
            await self._after_restore(lost)

    async def _after_restore(self, lost: list[str]) -> None:
        """Answer the requests the previous process's exit cut, then resume the queues."""
        cut, self._cut = self._cut, []
        gen = self._agents.generation
        for request in cut:
            if request.method == "initialize" and gen is not None and gen.alive:
                # No side effects, and an editor may never retry it (Zed does not): the new
                # process answers it instead of an error.
                request.generation = gen.number
                self._editor_requests.add(request)
                message = {"jsonrpc": "2.0", "id": request.id, "method": "initialize"}
                await self._to_agent(gen, _dumps({**message, "params": request.params}))
                continue
            why = self._registry.lost_reason(request.session_id)
            # The exit that cut it, not a later one (a restart may have died in between).
            record = self._agents.exit_of(request.generation)
            if record is None:
                continue
            answer = answers.exit_error(
                request.id,
                self._name,
                record,
                restored=why is None,
                why_not=why,
                has_session=request.session_id is not None,
            )
            await self._editor.send(answer)
        await self._prompts.resume(lost)

    def _take_cut(self, key: IdKey) -> bool:
        """Take the request ``key`` out of those the exit cut; False when it is not there."""
        cut = [r for r in self._cut if id_key(r.id) != key]
        if len(cut) == len(self._cut):
            return False
        self._cut = cut
        return True

    async def generation_gone(self, gen: RelayGeneration) -> None:
        """``gen`` is gone: its prompts wait for the restore's outcome, its requests to the
        editor are cancelled there."""
        gen.writer.dispose()  # its queued lines leave the budget (its task may never have run)
        self._turns.cut()
        self._cut += self._editor_requests.take_generation(gen.number)
        for request in self._agent_requests.orphan_generation(gen.number):
            await self._editor.send(answers.cancel_request(request.editor_id))

    async def gave_up(self, why: str) -> None:
        self.failure = why
        self.exit_code = EXIT_AGENT_GONE
        log.info("%s is gone for good: %s", self._name, why)  # the command says it once
        await self._answer_everything(why)
        self.stop()

    async def _answer_everything(self, why: str) -> None:
        ids = [r.id for r in self._cut] + [r.id for r in self._editor_requests.take_all()]
        ids += [p.id for p in self._turns.take_everything()]
        self._cut = []
        waiting = [self._held] if self._held is not None else []
        waiting += self._backlog.take_all()
        ids += [frame.id for frame in waiting if frame.kind is FrameKind.REQUEST]
        for request_id in ids:
            await self._editor.send(answers.gone_error(request_id, self._name, why))

    async def _answer_gone(self, request_id: Any) -> None:
        why = self.failure or "the proxy is stopping"
        await self._editor.send(answers.gone_error(request_id, self._name, why))

    # -- writing -----------------------------------------------------------------------------

    async def _to_agent(self, gen: RelayGeneration, line: bytes, *, valid: bool = True) -> bool:
        return await gen.send(line, valid=valid)

    def sent_to_agent(self, line: bytes, valid: bool) -> None:
        if self._editor.recorder is not None:
            self._editor.recorder.message("bridge->agent", line, valid=valid)

    def event(self, event: dict[str, Any]) -> None:
        self._editor.event(event)

    @property
    def _name(self) -> str:
        return self._spec.name


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
