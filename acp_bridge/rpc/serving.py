"""The serving side of a :class:`~acp_bridge.rpc.peer.JsonRpcPeer`: incoming requests.

* A worker serves one request at a time, each inside that request's own cancel scope, then
  waits for the next one; a new worker is started only when none is idle, so there are never
  more workers than requests in flight, and at most :data:`IDLE_WORKERS_KEPT` idle ones stay
  after a burst. Reusing a worker costs one wake-up instead of starting a task (anyio's task
  start is most of what serving a small request costs). Handlers share their worker's
  context: a handler must not leave a ``ContextVar`` set for the next request.
* At most ``max_in_flight`` requests are served at once. At the bound :meth:`serve` (called by
  the peer's reader, holding the next request) waits for a handler to finish, so the reader
  stops reading and the other side's writes back up into its pipe: backpressure, nothing
  dropped or refused. A slot is held until the answer is written, not just computed: when the
  other side stops reading our answers, workers waiting to write them count against the bound.
* :meth:`cancel` (``$/cancel_request``) cancels the named request's scope, even before its
  worker started it; the handler then answers -32800.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup

from acp_bridge.errors import (
    ConnectionClosedError,
    LocalProtocolError,
    ResourceClosedError,
    RpcError,
)
from acp_bridge.rpc.dispatch import RequestDispatcher
from acp_bridge.wire import jsonrpc
from acp_bridge.wire.jsonrpc import Request, RequestId

__all__ = ["IDLE_WORKERS_KEPT", "RequestServer"]

log = logging.getLogger(__name__)

IDLE_WORKERS_KEPT: Final = 32
"""Idle request workers kept waiting for the next request; more finish after a burst. Each
costs a few KB (64 of them held about 300-500 KB here), and 32 cover the requests an agent
keeps open at once in practice."""

Send = Callable[[dict[str, Any]], Awaitable[None]]


class RequestServer:
    """Serves the requests a peer's reader hands it; answers through ``send``."""

    def __init__(
        self, dispatcher: RequestDispatcher, send: Send, *, name: str, max_in_flight: int
    ) -> None:
        self._dispatcher = dispatcher
        self._send = send
        self._name = name
        self._max_in_flight = max_in_flight
        self._inflight: dict[RequestId, anyio.CancelScope] = {}
        self._slots = anyio.Semaphore(max_in_flight)
        self._idle: list[_WorkerSlot] = []
        self._task_group: TaskGroup | None = None

    def attach(self, task_group: TaskGroup) -> None:
        """The task group new workers run in (the peer's, so they end with the connection)."""
        self._task_group = task_group

    @property
    def in_flight(self) -> int:
        """Requests being served or answered now (never more than ``max_in_flight``)."""
        return self._max_in_flight - self._slots.value

    @property
    def serving(self) -> int:
        """Requests whose handler has not finished yet."""
        return len(self._inflight)

    @property
    def idle_workers(self) -> int:
        return len(self._idle)

    def cancel(self, params: Any) -> None:
        """``$/cancel_request`` with ``params``: cancel that request's handler, if in flight."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        scope = self._inflight.get(request_id)
        if scope is None:
            log.debug("%s: cancel for a request not in flight", self._name)
        else:
            scope.cancel()

    async def serve(self, request: Request) -> None:
        """Hand ``request`` to a worker; at the bound, first wait for a slot (backpressure)."""
        if request.id in self._inflight:
            # Answering would be ambiguous: both requests share the id. The reply is written
            # by the reader itself, so a flood of these is slowed, not turned into tasks.
            log.warning("%s reused id %r of a request still in flight", self._name, request.id)
            await self.reply(
                jsonrpc.error_response(request.id, RpcError.invalid_request("duplicate id"))
            )
            return
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            await self._slots.acquire()  # backpressure: stop reading until one ends
        scope = anyio.CancelScope()
        self._inflight[request.id] = scope
        if self._idle:
            slot = self._idle.pop()
            slot.job = (request, scope)
            slot.wake.set()
        else:
            assert self._task_group is not None
            self._task_group.start_soon(self._run_worker, request, scope)

    async def reply(self, response: dict[str, Any]) -> None:
        """Send a reply of the peer's own (an error); a closed connection is only logged."""
        try:
            await self._send(response)
        except (ConnectionClosedError, ResourceClosedError) as exc:
            log.debug("%s: could not send an error reply: %s", self._name, exc)

    async def _run_worker(self, request: Request, scope: anyio.CancelScope) -> None:
        """Serve ``request``, then whatever :meth:`serve` hands this worker next. Each job's
        scope was registered before the handoff, so a cancel that comes before the worker
        starts it still cancels it."""
        while True:
            await self._serve(request, scope)
            if len(self._idle) >= IDLE_WORKERS_KEPT:
                return
            slot = _WorkerSlot()
            self._idle.append(slot)
            try:
                await slot.wake.wait()
            except BaseException:
                # Only the connection's end cancels an idle worker; a job handed over in the
                # same step is never served, but its slot and scope must still be let go.
                if slot in self._idle:
                    self._idle.remove(slot)
                if slot.job is not None:
                    self._inflight.pop(slot.job[0].id, None)
                    self._slots.release()
                raise
            assert slot.job is not None
            request, scope = slot.job

    async def _serve(self, request: Request, scope: anyio.CancelScope) -> None:
        try:
            try:
                with scope:
                    response = await self._dispatcher.dispatch(request)
                if scope.cancelled_caught:
                    response = jsonrpc.error_response(request.id, RpcError.request_cancelled())
            finally:
                del self._inflight[request.id]
            await self._answer(request, response)
        finally:
            self._slots.release()

    async def _answer(self, request: Request, response: dict[str, Any]) -> None:
        try:
            await self._send(response)
        except LocalProtocolError as exc:
            log.error("%s: result of %s is not JSON: %s", self._name, request.method, exc)
            await self.reply(
                jsonrpc.error_response(request.id, RpcError.internal_error("unserializable"))
            )
        except (ConnectionClosedError, ResourceClosedError) as exc:
            log.debug("%s: could not answer %s: %s", self._name, request.method, exc)


class _WorkerSlot:
    """An idle worker: :meth:`RequestServer.serve` puts a job in it and sets ``wake``."""

    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.wake = anyio.Event()
        self.job: tuple[Request, anyio.CancelScope] | None = None
