"""``terminal/*``: commands an agent runs on the client's machine (acp-protocol.md section 5).

:class:`TerminalManager` is long-lived: ``await tg.start(manager.run)`` before registering its
handlers. ``run`` owns one task group holding, per terminal, an output pump and an exit watcher.

A command runs in its own process group, in the session's cwd or an absolute ``cwd``, with
``base_env`` plus the request's ``env``; ``terminal/create`` answers as soon as the process
exists (:mod:`acp_bridge.client.terminal_spawn`).

Output is capped at ``outputByteLimit`` (default ``default_output_byte_limit``, at most
``max_output_byte_limit``) by dropping bytes *from the front*, at a UTF-8 character boundary;
``truncated`` turns true (:mod:`acp_bridge.client.terminal_output`).

Exit: the process exited and its output reached EOF, or ``OUTPUT_DRAIN_S`` passed (a
background grandchild may hold the pipe forever). A signal death is ``{"exitCode": null,
"signal": "SIGTERM"}``: the schema's ``exitCode`` is non-negative and ``signal`` a string.

Stopping a terminal (kill, release, shutdown) is shielded and bounded: SIGTERM to the process
group and its escaped descendants, up to ``term_grace_s``, then SIGKILL, up to ``kill_wait_s``,
the whole giving up (logged) after their sum + 2 s (:mod:`acp_bridge.client.terminal_stop`).
A command that exited but left descendants in its group is stopped too. ``kill`` keeps the
terminal (output and exit status stay readable); ``release`` also forgets it. Cancelling
``run`` or calling :meth:`TerminalManager.aclose` releases every terminal concurrently, then
cancels the pumps.

Generations. A terminal belongs to the agent process (its *generation*, an int) whose request
created it, and dies with it: :meth:`TerminalManager.for_generation` gives the handlers to
register on that process's peer, which see only that generation's terminals, and
:meth:`TerminalManager.end_generation` stops and forgets them all (bounded, as above) once the
process is gone, so they no longer count against ``max_terminals``. A later ``terminal/create``
of an ended generation is refused; one still spawning when it ends is stopped at once.

Errors: an unknown session -32002; an unknown (or released, or another session's or
generation's) terminal -32002 with ``data.terminalId``; a bad ``cwd``, a command that cannot
start, a NUL byte or a lone surrogate in ``command``/``args``/``env``/``cwd`` (``nul_byte``,
``not_utf8``: neither can reach ``execve``), an env name that is empty or holds ``=``, or more
than ``max_terminals`` unreleased terminals -32602 with a ``reason``; calls before ``run``, after
shutdown, or from an ended generation -32603.
"""

from __future__ import annotations

import logging
import secrets
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
from anyio.abc import Process, TaskGroup, TaskStatus

from acp_bridge.client.terminal_generation import GenerationTerminals
from acp_bridge.client.terminal_output import OutputBuffer
from acp_bridge.client.terminal_spawn import command_argv, environment, spawn, working_directory
from acp_bridge.client.terminal_stop import KILL_WAIT_S, TERM_GRACE_S, stop_command
from acp_bridge.client.terminal_text import check_request_text
from acp_bridge.errors import ErrorCode, RpcError

if TYPE_CHECKING:
    from acp_bridge.wire.client_methods import TerminalRequest

__all__ = [
    "KILL_WAIT_S",
    "OUTPUT_DRAIN_S",
    "TERM_GRACE_S",
    "GenerationTerminals",
    "OutputBuffer",
    "TerminalManager",
]

log = logging.getLogger(__name__)

MAX_OUTPUT_BYTE_LIMIT: Final = 64 * 1024 * 1024  # kept per terminal, whatever the agent asks
OUTPUT_DRAIN_S: Final = 1.0  # after the exit, for EOF on the output, before reporting the exit
_READ_CHUNK: Final = 65536
_ENDED_GENERATIONS_KEPT: Final = 1024  # beyond it the oldest is forgotten (its peer is long gone)


def _error(code: int, message: str, **data: Any) -> RpcError:
    return RpcError(code, message, data or None)


def _unknown_terminal(terminal_id: str) -> RpcError:
    return _error(ErrorCode.RESOURCE_NOT_FOUND, "Unknown terminal", terminalId=terminal_id)


@dataclass(eq=False)
class _Terminal:
    id: str
    session_id: str
    generation: int
    process: Process
    output: OutputBuffer
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    eof: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)  # exited (and drained) or released
    stopped: anyio.Event = field(default_factory=anyio.Event)  # released and stopped
    returncode: int | None = None  # recorded once exited and drained (or released)
    released: bool = False

    @property
    def pid(self) -> int:  # also the process group's id
        return self.process.pid

    def exit_fields(self) -> dict[str, Any] | None:
        """``{exit_code, signal}`` once the exit is reported, else None."""
        code = self.returncode
        if code is None or not self.done.is_set():
            return None
        if code >= 0:
            return {"exit_code": code, "signal": None}
        try:
            return {"exit_code": None, "signal": signal.Signals(-code).name}
        except ValueError:  # a real-time signal has no name of its own
            return {"exit_code": None, "signal": f"SIG{-code}"}


class TerminalManager:
    """Runs ``terminal/*`` commands for every session of one client (see the module docstring).

    Register the handlers of :meth:`for_generation` on each agent process's peer, call
    :meth:`end_generation` when that process is gone, and advertise ``terminal: true``. The
    manager's own handler methods serve generation 0 (for callers not yet generation-aware).
    """

    def __init__(
        self,
        cwd_for: Callable[[str], Path | None],
        *,
        default_output_byte_limit: int = 1024 * 1024,
        max_output_byte_limit: int = MAX_OUTPUT_BYTE_LIMIT,
        max_terminals: int = 32,
        base_env: Mapping[str, str] | None = None,
        term_grace_s: float = TERM_GRACE_S,
        kill_wait_s: float = KILL_WAIT_S,
    ) -> None:
        self._cwd_for = cwd_for
        self.default_output_byte_limit = default_output_byte_limit
        self.max_output_byte_limit = max_output_byte_limit
        self.max_terminals = max_terminals
        self._base_env = None if base_env is None else dict(base_env)
        self._term_grace_s = term_grace_s
        self._kill_wait_s = kill_wait_s
        self._terminals: dict[str, _Terminal] = {}
        self._ended: dict[int, None] = {}  # ordered set, at most _ENDED_GENERATIONS_KEPT
        self._starting = 0
        self._tg: TaskGroup | None = None
        self._closing = anyio.Event()
        self._closed = anyio.Event()

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else "running" if self._tg else "not started"
        return f"<TerminalManager [{state}, {len(self._terminals)} terminal(s)]>"

    def pids(self, generation: int | None = None) -> dict[str, int]:
        """terminalId -> pid (also the process group id) of every unreleased terminal (of
        ``generation``, if given)."""
        return {
            tid: term.pid
            for tid, term in self._terminals.items()
            if generation is None or term.generation == generation
        }

    def for_generation(self, generation: int) -> GenerationTerminals:
        """The handlers to register on the peer of agent process ``generation``."""
        return GenerationTerminals(self, generation)

    async def end_generation(self, generation: int) -> None:
        """Stop and forget every terminal of ``generation``, concurrently, shielded, bounded
        (``term_grace_s + kill_wait_s`` plus 2 s for process scans, at worst); refuse its later
        ``create`` calls."""
        self._ended[generation] = None
        while len(self._ended) > _ENDED_GENERATIONS_KEPT:
            del self._ended[next(iter(self._ended))]
        doomed = [t for t in self._terminals.values() if t.generation == generation]
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as stoppers:
                for term in doomed:
                    stoppers.start_soon(self._release, term)
        if doomed:
            log.debug("generation %d ended: %d terminal(s) stopped", generation, len(doomed))

    # --- lifecycle ----------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled or :meth:`aclose`; then stop every terminal (shielded, bounded)."""
        if self._tg is not None or self._closed.is_set():
            raise RuntimeError("TerminalManager.run() may only be started once")
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                try:
                    await self._closing.wait()
                finally:
                    self._closing.set()
                    with anyio.CancelScope(shield=True):
                        async with anyio.create_task_group() as stoppers:
                            for term in list(self._terminals.values()):
                                stoppers.start_soon(self._release, term)
                    tg.cancel_scope.cancel()
        finally:
            self._closed.set()

    async def aclose(self) -> None:
        """Stop every terminal and end :meth:`run`; returns once that is done. Idempotent."""
        self._closing.set()
        if self._tg is not None:
            await self._closed.wait()
        else:
            self._closed.set()

    # --- handlers -----------------------------------------------------------------------------

    async def create(self, params: Any, *, generation: int = 0) -> dict[str, Any]:
        """``terminal/create`` -> ``{terminalId}``, as soon as the process exists.

        Raises:
            RpcError: unknown session, bad cwd/text, too many terminals, spawn failure, not
                running, generation ended.
        """
        # The terminal models are imported by the handlers that use them: not needed until an
        # agent creates a terminal.
        from acp_bridge.wire.client_methods import CreateTerminalRequest, CreateTerminalResponse

        request = CreateTerminalRequest.parse(params)
        tg = self._tg
        if tg is None or self._closing.is_set():
            state = "shut down" if self._closing.is_set() else "not running"
            raise _error(ErrorCode.INTERNAL_ERROR, f"Terminal manager {state}")
        self._refuse_ended(generation)
        check_request_text(request)
        cwd = await working_directory(request, self._cwd_for(request.session_id))
        argv = command_argv(request)
        env = environment(request, self._base_env)
        if len(self._terminals) + self._starting >= self.max_terminals:
            limit = self.max_terminals
            message = f"Too many terminals (limit {limit}); release some first"
            raise _error(
                ErrorCode.INVALID_PARAMS, message, reason="too_many_terminals", limit=limit
            )
        requested = request.output_byte_limit
        limit = self.default_output_byte_limit if requested is None else requested
        self._starting += 1
        try:
            process = await spawn(argv, cwd, env, request.command)
        finally:
            self._starting -= 1
        output = OutputBuffer(min(limit, self.max_output_byte_limit))
        term_id = f"term_{secrets.token_hex(8)}"
        term = _Terminal(term_id, request.session_id, generation, process, output)
        self._terminals[term.id] = term
        if self._closing.is_set() or generation in self._ended:  # while we were spawning
            with anyio.CancelScope(shield=True):
                await self._release(term)
            self._refuse_ended(generation)
            raise _error(ErrorCode.INTERNAL_ERROR, "Terminal manager shut down")
        tg.start_soon(self._watch, term)
        log.debug("terminal %s (pid %d): %s in %s", term.id, term.pid, argv, cwd)
        return CreateTerminalResponse(terminal_id=term.id).dump()

    async def output(self, params: Any, *, generation: int = 0) -> dict[str, Any]:
        """``terminal/output`` -> ``{output, truncated, exitStatus?}``."""
        from acp_bridge.wire.client_methods import (
            TerminalExitStatus,
            TerminalOutputResponse,
            TerminalRequest,
        )

        term = self._lookup(TerminalRequest.parse(params), generation)
        status = term.exit_fields()
        extra = {} if status is None else {"exit_status": TerminalExitStatus(**status)}
        text = term.output.text(final=status is not None)
        return TerminalOutputResponse(output=text, truncated=term.output.truncated, **extra).dump()

    async def wait_for_exit(self, params: Any, *, generation: int = 0) -> dict[str, Any]:
        """``terminal/wait_for_exit`` -> ``{exitCode, signal}`` once the command has exited.

        Raises:
            RpcError: unknown terminal, or it was released while we waited.
        """
        from acp_bridge.wire.client_methods import TerminalRequest, WaitForTerminalExitResponse

        request = TerminalRequest.parse(params)
        term = self._lookup(request, generation)
        await term.done.wait()
        if (status := term.exit_fields()) is None:  # released before it could exit
            raise _unknown_terminal(request.terminal_id)
        return WaitForTerminalExitResponse(**status).dump()

    async def kill(self, params: Any, *, generation: int = 0) -> dict[str, Any]:
        """``terminal/kill`` -> ``{}``; the terminal stays valid and its output readable."""
        from acp_bridge.wire.client_methods import TerminalRequest

        term = self._lookup(TerminalRequest.parse(params), generation)
        with anyio.CancelScope(shield=True):
            await self._stop(term)
            # The output may still be draining; report the exit once it has.
            with anyio.move_on_after(OUTPUT_DRAIN_S + 1):
                await term.done.wait()
        return {}

    async def release(self, params: Any, *, generation: int = 0) -> dict[str, Any]:
        """``terminal/release`` -> ``{}``; stops the command if it runs. The id is then unknown."""
        from acp_bridge.wire.client_methods import TerminalRequest

        term = self._lookup(TerminalRequest.parse(params), generation)
        with anyio.CancelScope(shield=True):
            await self._release(term)
        return {}

    # --- helpers ------------------------------------------------------------------------------

    def _lookup(self, request: TerminalRequest, generation: int) -> _Terminal:
        term = self._terminals.get(request.terminal_id)
        if term is None or (term.session_id, term.generation) != (request.session_id, generation):
            raise _unknown_terminal(request.terminal_id)
        return term

    def _refuse_ended(self, generation: int) -> None:
        if generation in self._ended:
            message = f"Agent generation {generation} has ended"
            raise _error(ErrorCode.INTERNAL_ERROR, message, reason="generation_ended")

    async def _watch(self, term: _Terminal) -> None:
        with term.scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, term)
                returncode = await term.process.wait()
                with anyio.move_on_after(OUTPUT_DRAIN_S):
                    await term.eof.wait()
                term.returncode = returncode
                term.done.set()

    @staticmethod
    async def _pump(term: _Terminal) -> None:
        stream = term.process.stdout
        assert stream is not None
        try:
            while True:
                term.output.feed(await stream.receive(_READ_CHUNK))
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        term.eof.set()

    async def _stop(self, term: _Terminal) -> None:
        """Stop ``term``'s command and its descendants (module docstring). Call shielded."""
        await stop_command(
            term.process, term.id, term_grace_s=self._term_grace_s, kill_wait_s=self._kill_wait_s
        )

    async def _release(self, term: _Terminal) -> None:
        """Stop ``term`` and forget it; returns once it is stopped, whoever began. Call
        shielded. Bounded: ``_stop`` is, and the first caller always finishes."""
        if term.released:
            await term.stopped.wait()
            return
        term.released = True
        self._terminals.pop(term.id, None)
        try:
            await self._stop(term)
            term.scope.cancel()
            if term.returncode is None:  # the watcher may not have seen it; waiters get it anyway
                term.returncode = term.process.returncode
            term.done.set()
            if term.process.returncode is not None:
                # Only now: on cancel, ``aclose`` waits for the process, shielded, unbounded.
                await term.process.aclose()
            elif term.process.stdout is not None:  # unkillable (logged by _stop): just let go
                await term.process.stdout.aclose()
        finally:
            term.stopped.set()
        log.debug("terminal %s released", term.id)
