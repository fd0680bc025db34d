"""A conversation: a durable FIFO queue of user messages fed to a supervised agent, one turn each.

The pieces: the :class:`QueueStore` (every message is committed before ``send`` returns), the
pure :class:`QueueMachine` (which message goes next and how each one ends), a
:class:`TurnDriver` (the turn itself, with the cancel grace window) and a
:class:`SupervisedAgent` (restarts that keep the session). This module performs what the
machine decides and reports back what happened; it holds no queue logic of its own.

Open one with :func:`acp_bridge.conversation.opening.open_conversation`.

Events go to subscribers as JSON-ready dicts, each with ``event`` and ``ts`` (the names of the
CLI's ``--json`` contract). Turn boundaries and lifecycle events are also written to the
store's event log; the high-rate ``update`` events are not.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from acp_bridge.client.events import (
    AgentExited,
    AgentGaveUp,
    AgentRestarting,
    AgentStarted,
    LifecycleEvent,
    PermissionDecided,
    SessionReplaced,
    SessionRestored,
    ToolCallClosed,
    TurnEvent,
    UpdateReceived,
)
from acp_bridge.client.session import Session, to_blocks
from acp_bridge.client.supervisor import SupervisedAgent
from acp_bridge.conversation.queue import QueueMachine
from acp_bridge.conversation.queue_model import (
    Action,
    Answered,
    CancelTurn,
    Failed,
    Idle,
    MessageFinal,
    MessageRecord,
    MessageState,
    ReviveAgent,
    StartTurn,
)
from acp_bridge.conversation.store import ConversationRecord, QueueStore
from acp_bridge.errors import AgentError, BridgeError, ResourceClosedError
from acp_bridge.session.driver import TurnDriver, TurnPolicy

__all__ = ["Conversation", "ConversationEvent"]

log = logging.getLogger(__name__)

ConversationEvent = dict[str, Any]
_T = TypeVar("_T")
_STOP_OR_CLOSE = ("stop", "close", "interrupt")
_BACKLOG = 1000


@dataclass
class _State:
    idle_reason: str | None = "drained"
    idle: anyio.Event = field(default_factory=anyio.Event)


class Conversation:
    """Use :func:`acp_bridge.conversation.opening.open_conversation`."""

    def __init__(
        self,
        store: QueueStore,
        record: ConversationRecord,
        agent: SupervisedAgent,
        session: Session,
        policy: TurnPolicy,
        task_group: TaskGroup,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.id = record.id
        self.agent = agent
        self.session = session
        self._store = store
        self._driver = TurnDriver(session, policy)
        self._task_group = task_group
        self._clock = clock
        self._machine = QueueMachine()
        self._subscribers: list[MemoryObjectSendStream[ConversationEvent]] = []
        self._state = _State()
        self._prompts: dict[int, list[dict[str, Any]]] = {}
        self._duration_ms = 0.0
        self._backlog: deque[ConversationEvent] = deque(maxlen=_BACKLOG)
        self._acting = anyio.Lock()

    # -- the caller's operations ----------------------------------------------------------

    async def send(self, content: Any, *, interrupt: bool = False) -> int:
        """Persist a message (committed before this returns) and queue it; returns its seq.

        With ``interrupt`` the running turn is cancelled (its message ends superseded) and this
        message goes next.
        """
        blocks = to_blocks(content)
        async with self._acting:
            record = await self._db(
                self._store.add_message,
                self.id,
                blocks,
                next=interrupt,
                unpause=True,
                now=self._clock(),
            )
            self._prompts[record.seq] = blocks
            await self.emit("queued", {"seq": record.seq, "interrupt": interrupt})
            await self._perform(self._machine.send(record.seq, interrupt=interrupt))
        return record.seq

    async def stop(self) -> None:
        """Cancel the running turn (it ends cancelled) and pause the queue until
        :meth:`resume` or a new send."""
        async with self._acting:
            await self._db(self._store.update_conversation, self.id, paused=True, now=self._clock())
            await self._perform(self._machine.stop())

    async def resume(self) -> None:
        async with self._acting:
            await self._db(
                self._store.update_conversation, self.id, paused=False, now=self._clock()
            )
            await self._perform(self._machine.resume())

    async def retry(self, seq: int) -> None:
        """Send a cancelled, superseded or failed message again, explicitly."""
        async with self._acting:
            await self._db(self._store.requeue, self.id, seq, next=False, now=self._clock())
            await self._perform(self._machine.retry(seq))

    async def close(self) -> None:
        """No new turn starts from now on; a running turn is cancelled."""
        await self._act(self._machine.close)

    async def set_config_option(self, config_id: str, value: str | bool) -> None:
        """Choose one of the agent's config options for this conversation. The choice is
        stored, and applied again after an agent restart or when the conversation resumes."""
        await self.session.set_config_option(config_id, value)
        await self._store_choices()

    async def set_mode(self, mode_id: str) -> None:
        """Choose one of the agent's modes (legacy); stored and re-applied like a config."""
        await self.session.set_mode(mode_id)
        await self._store_choices()

    async def _store_choices(self) -> None:
        config = {"options": dict(self.session.config_choices), "mode": self.session.mode_id}
        await self._db(self._store.update_conversation, self.id, config=config, now=self._clock())

    def messages(self) -> list[MessageRecord]:
        return list(self._machine.messages())

    async def wait_idle(self) -> str:
        """Wait until no turn runs and none will start by itself; returns why
        (``drained``, ``paused``, ``agent_gone``, ``closed``)."""
        while self._state.idle_reason is None:
            await self._state.idle.wait()
        return self._state.idle_reason

    def subscribe(self, *, replay: bool = False) -> MemoryObjectReceiveStream[ConversationEvent]:
        """Every event from now on (unbounded: a slow reader slows nothing). With ``replay``,
        first the events other than updates since the conversation opened (agent_started,
        session, ...), so a subscriber that comes second misses nothing that matters."""
        send, receive = anyio.create_memory_object_stream[ConversationEvent](math.inf)
        if replay:
            for event in self._backlog:
                send.send_nowait(event)
        self._subscribers.append(send)
        return receive

    # -- performing what the machine decides --------------------------------------------

    async def start(self, records: list[MessageRecord], *, paused: bool) -> None:
        """Load the stored queue (a message cut by a crash of the bridge ends failed,
        recoverable) and start the next message never prompted."""
        async with self._acting:
            self._machine, actions = QueueMachine.restore(records, paused=paused)
            await self._perform(actions)

    async def _act(self, decide: Callable[[], list[Action]]) -> None:
        """Ask the machine and perform its answer, as one step: actions from different calls
        must not interleave (a start must not reach the store before the previous message's
        final state, nor a stale "idle" land after a start)."""
        async with self._acting:
            await self._perform(decide())

    async def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, StartTurn):
                self._state.idle_reason = None
                self._task_group.start_soon(self._run_turn, action)
            elif isinstance(action, CancelTurn):
                self._driver.request_cancel(action.reason)
            elif isinstance(action, ReviveAgent):
                await self.agent.revive()
            elif isinstance(action, MessageFinal):
                await self._finish(action)
            elif isinstance(action, Idle):
                self._state.idle_reason = action.reason
                self._state.idle.set()
                self._state.idle = anyio.Event()

    async def _run_turn(self, start: StartTurn) -> None:
        seq = start.seq
        try:
            await self.agent.wait_ready()  # a cold start or a restart in progress
        except AgentError:
            await self._act(self._machine.agent_gone)
            return
        blocks = self._prompts.get(seq) or await self._stored_prompt(seq)
        text = " ".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        started_event = {"seq": seq, "text": text}
        async with self._acting:
            if not self._machine.start_confirmed(seq, start.generation):
                return  # withdrawn while we waited: never prompted
            await self._db(
                self._store.mark_running,
                self.id,
                seq,
                now=self._clock(),
                event=("turn_started", started_event),
            )
            await self.emit("turn_started", started_event)
        started = time.monotonic()
        try:
            outcome = await self._driver.run(blocks, lambda event: self._on_turn_event(seq, event))
        except BridgeError as exc:  # no turn started: the agent is gone, or was closed
            failure = Failed(str(exc), False)
            await self._act(lambda: self._machine.turn_ended(seq, failure))
            if not isinstance(exc, ResourceClosedError):
                await self._act(self._machine.agent_gone)
            return
        self._duration_ms = (time.monotonic() - started) * 1000
        if outcome.status == "cancelled" and outcome.cancel_reason not in _STOP_OR_CLOSE:
            await self._act(lambda: self._machine.turn_timed_out(seq))  # the driver's deadline
        if outcome.status == "failed":
            result: Answered | Failed = Failed(outcome.error or "failed", outcome.recoverable)
        else:
            result = Answered(outcome.stop_reason or "cancelled")

        def decide() -> list[Action]:
            # One step: a waiter must not see the pause of an unrecoverable failure alone
            # when the agent is in fact gone for good.
            actions = self._machine.turn_ended(seq, result)
            return actions + self._machine.agent_gone() if self.agent.is_failed else actions

        await self._act(decide)

    async def _finish(self, final: MessageFinal) -> None:
        error = None
        if final.error is not None:
            error = {"code": "turn_failed", "message": final.error, "details": {}}
        state = final.state.name.lower()
        if final.state is MessageState.FAILED:
            name = "turn_failed"
            data: dict[str, Any] = {
                "seq": final.seq,
                "error": self.structured_error(error or {}, final.recoverable),
                "recoverable": final.recoverable,
            }
        else:
            name = "turn_ended"
            done = final.state is MessageState.DONE
            data = {
                "seq": final.seq,
                "stopReason": final.stop_reason if done else "cancelled",
                "state": state,
                "duration_ms": round(self._duration_ms, 1),
            }
        changed = await self._db(
            self._store.finish,
            self.id,
            final.seq,
            state,
            stop_reason=final.stop_reason,
            error=error,
            recoverable=final.recoverable,
            now=self._clock(),
            event=(name, data),  # logged in the same commit as the final state
        )
        if changed:
            await self.emit(name, data)

    def structured_error(self, error: dict[str, Any], recoverable: bool | None) -> dict[str, Any]:
        """A structured error for callers: what happened, to which agent and session, and
        whether the next turn can proceed."""
        return {
            "code": error.get("code", "turn_failed"),
            "message": error.get("message", ""),
            "agent": self.agent.name,
            "sessionId": self.session.id,
            "recoverable": bool(recoverable),
        }

    async def _stored_prompt(self, seq: int) -> list[dict[str, Any]]:
        record = await self._db(self._store.get_message, self.id, seq)
        return list(record.content) if record is not None else []

    # -- events ---------------------------------------------------------------------------------

    async def _on_turn_event(self, seq: int, event: TurnEvent) -> None:
        if isinstance(event, UpdateReceived):
            await self.emit(
                "update", {"seq": seq, "sessionId": event.session_id, "update": event.raw}
            )
        elif isinstance(event, PermissionDecided):
            decision = event.option_kind or "cancelled"
            data = {"seq": seq, "toolCall": event.tool_call, "decision": decision}
            await self.emit("permission", data, seq=seq, keep=True)
        elif isinstance(event, ToolCallClosed):
            data = {
                "seq": seq,
                "toolCallId": event.tool_call_id,
                "status": event.status,
                "reason": event.reason,
            }
            await self.emit("tool_call_closed", data, seq=seq, keep=True)

    async def on_lifecycle(self, event: LifecycleEvent) -> None:
        name, data = _lifecycle_json(event)
        if isinstance(event, SessionReplaced):
            await self._db(
                self._store.update_conversation, self.id, session_id=event.new, now=self._clock()
            )
        await self.emit(name, data, keep=True)

    async def emit(
        self, name: str, data: dict[str, Any], *, seq: int | None = None, keep: bool = False
    ) -> None:
        event: ConversationEvent = {"event": name, "ts": round(self._clock(), 6), **data}
        if name != "update":
            self._backlog.append(event)
        if keep:
            await self._db(self._store.add_event, self.id, name, data, seq=seq, now=self._clock())
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.remove(send)

    async def _log(self, name: str, data: dict[str, Any], *, seq: int | None = None) -> None:
        await self._db(self._store.add_event, self.id, name, data, seq=seq, now=self._clock())

    def close_subscribers(self) -> None:
        for send in self._subscribers:
            send.close()

    async def _db(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        # SQLite commits fsync: keep them off the event loop.
        return await anyio.to_thread.run_sync(lambda: method(*args, **kwargs))


def _lifecycle_json(event: LifecycleEvent) -> tuple[str, dict[str, Any]]:
    if isinstance(event, AgentStarted):
        return "agent_started", {
            "pid": event.pid,
            "agentInfo": event.agent_info,
            "protocolVersion": event.protocol_version,
            "generation": event.generation,
        }
    if isinstance(event, AgentExited):
        return "agent_exited", {
            "pid": event.pid,
            "returncode": event.returncode,
            "signal": event.signal,
            "reason": event.reason,
            "stderr_tail": event.stderr_tail,
            "will_restart": event.will_restart,
        }
    if isinstance(event, AgentRestarting):
        return "agent_restarted", {"attempt": event.attempt, "delay_s": event.delay_s}
    if isinstance(event, SessionRestored):
        return "session_restored", {"sessionId": event.session_id, "how": event.how}
    if isinstance(event, SessionReplaced):
        return "session_replaced", {"old": event.old, "new": event.new, "reason": event.reason}
    assert isinstance(event, AgentGaveUp)
    return "agent_gave_up", {"reason": event.reason, "history": list(event.history)}
