"""``terminal/*``: commands an agent runs on the client's machine (acp-protocol.md section 5).

:class:`TerminalManager` is long-lived: ``await tg.start(manager.run)`` before registering its
handlers. ``run`` owns one task group holding, per terminal, an output pump and an exit watcher.

Running a command:

* In its own process group (``start_new_session=True``), holding everything it spawns. stdin
  is ``/dev/null``; stdout and stderr share one pipe, so their interleaving is kept.
* ``command`` with ``args`` is executed directly; without ``args`` it runs through ``/bin/sh
  -c``, since agents send whole command lines that way (Zed runs them through a shell too).
* In the session's cwd, or in ``cwd``, which must be an absolute existing directory. It is
  *not* confined to the session's tree: the command could ``cd`` anywhere anyway, so the
  permission policy (tool kind ``execute``) is the real gate.
* With ``base_env`` plus the request's ``env``. ``base_env=None`` inherits ours; the library
  never reads ``os.environ``, so ``env`` is then refused (the CLI passes ``os.environ``).
* ``terminal/create`` answers as soon as the process exists.

Output is capped at ``outputByteLimit`` (default ``default_output_byte_limit``, at most
``max_output_byte_limit``) by dropping bytes *from the front*, then any UTF-8 continuation
bytes, so the kept text starts on a character boundary; ``truncated`` turns true. While the
command runs, an incomplete multibyte sequence at the end is held back rather than shown as
U+FFFD; any other invalid byte becomes U+FFFD.

Exit: the process exited and its output reached EOF, or ``OUTPUT_DRAIN_S`` passed (a
background grandchild may hold the pipe forever). A signal death is ``{"exitCode": null,
"signal": "SIGTERM"}``: the schema's ``exitCode`` is non-negative and ``signal`` a string.

Stopping a terminal (kill, release, shutdown), shielded and with every wait bounded:

1. SIGTERM the process group and the descendants that left it (psutil snapshot);
2. wait up to ``term_grace_s`` for the command *and* those descendants to be gone;
3. if anything lives, SIGKILL it all the same way and wait up to ``kill_wait_s``;

and the whole stop gives up (logged) after ``term_grace_s + kill_wait_s`` + 2 s, since its
psutil scans run in threads that a process stuck in the kernel could block.

A command that exited but left descendants in its group gets the same steps, so no background
grandchild survives. ``kill`` keeps the terminal (output and exit status stay readable);
``release`` also forgets it. Cancelling ``run`` or calling :meth:`TerminalManager.aclose`
releases every terminal concurrently, then cancels the pumps.

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
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import psutil
from anyio.abc import Process, TaskGroup, TaskStatus

from acp_bridge.errors import ErrorCode, RpcError
from acp_bridge.process import killer
from acp_bridge.wire.client_methods import (
    CreateTerminalRequest,
    CreateTerminalResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    TerminalRequest,
    WaitForTerminalExitResponse,
)

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
TERM_GRACE_S: Final = 2.0  # between SIGTERM and SIGKILL
KILL_WAIT_S: Final = 5.0  # for the kernel to finish off SIGKILLed processes, before giving up
OUTPUT_DRAIN_S: Final = 1.0  # after the exit, for EOF on the output, before reporting the exit
_SURVIVOR_POLL_S: Final = 0.05  # descendants are not our children: no waitpid(), so poll
_READ_CHUNK: Final = 65536
_SCAN_ALLOWANCE_S: Final = 2.0  # for the psutil scans in a stop, on top of its two waits
_ENDED_GENERATIONS_KEPT: Final = 1024  # beyond it the oldest is forgotten (its peer is long gone)


def _error(code: int, message: str, **data: Any) -> RpcError:
    return RpcError(code, message, data or None)


def _unknown_terminal(terminal_id: str) -> RpcError:
    return _error(ErrorCode.RESOURCE_NOT_FOUND, "Unknown terminal", terminalId=terminal_id)


def _check_exec_text(name: str, value: str) -> None:
    """Refuse what ``execve`` cannot take: a NUL byte, or a lone surrogate (JSON ``"\\ud800"``
    decodes to one, and it has no UTF-8 encoding; surrogateescape would even turn some into
    raw bytes). Without this, the spawn raises ValueError, answered -32603 with a traceback."""
    if "\0" in value:
        message = f"{name} contains a NUL byte"
        raise _error(ErrorCode.INVALID_PARAMS, message, field=name, reason="nul_byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        message = f"{name} is not valid Unicode text (a lone surrogate at {exc.start})"
        raise _error(ErrorCode.INVALID_PARAMS, message, field=name, reason="not_utf8") from None


def _check_request_text(request: CreateTerminalRequest) -> None:
    _check_exec_text("command", request.command)
    for index, arg in enumerate(request.args or ()):
        _check_exec_text(f"args[{index}]", arg)
    for index, var in enumerate(request.env or ()):
        name = f"env[{index}].name"
        _check_exec_text(name, var.name)
        _check_exec_text(f"env[{index}].value", var.value)
        if not var.name or "=" in var.name:
            message = "An environment variable name must be non-empty and hold no '='"
            raise _error(ErrorCode.INVALID_PARAMS, message, field=name, reason="bad_env_name")
    if request.cwd is not None:
        _check_exec_text("cwd", request.cwd)


# A lead byte's top four bits -> the length of the sequence it starts.
_SEQUENCE_LENGTH: Final = {0b1100: 2, 0b1101: 2, 0b1110: 3, 0b1111: 4}


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _complete_length(data: bytes | bytearray) -> int:
    """``len(data)`` minus an incomplete UTF-8 sequence at its very end."""
    for back in range(1, min(4, len(data)) + 1):
        lead = data[-back]
        if _continuation(lead):
            continue
        needed = _SEQUENCE_LENGTH.get(lead >> 4, 1) if lead < 0xF8 else 1
        return len(data) - back if needed > back else len(data)
    return len(data)


async def _in_thread(scan: Callable[..., list[psutil.Process]], *args: Any) -> list[Any]:
    """A psutil scan in a worker thread, abandoned on cancel (it only builds a fresh list)."""
    return await anyio.to_thread.run_sync(scan, *args, abandon_on_cancel=True)


def _survivors(pid: int, snapshot: list[psutil.Process]) -> list[psutil.Process]:
    """Living processes other than ``pid`` in its group or in ``snapshot``. Blocking."""
    found = {p.pid: p for p in killer.living(snapshot)}
    for proc in killer.group_members(pid):
        found.setdefault(proc.pid, proc)
    found.pop(pid, None)
    return list(found.values())


class OutputBuffer:
    """A terminal's output: the last ``limit`` bytes, cut at a UTF-8 character boundary."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.truncated = False
        self._data = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._data += chunk
        excess = len(self._data) - self.limit
        if excess > 0:
            del self._data[:excess]
            self.truncated = True
        if self.truncated:
            # A cut may split a character, and the rest of it may come in later chunks: any
            # continuation byte at the front is such an orphan (a character has at most 3).
            skip = 0
            while skip < min(3, len(self._data)) and _continuation(self._data[skip]):
                skip += 1
            del self._data[:skip]

    def text(self, *, final: bool) -> str:
        """The output as text; unless ``final``, a trailing partial character is held back."""
        data = self._data if final else self._data[: _complete_length(self._data)]
        return bytes(data).decode("utf-8", errors="replace")


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


class GenerationTerminals:
    """The ``terminal/*`` handlers of one generation (agent process); see the module docstring."""

    def __init__(self, manager: TerminalManager, generation: int) -> None:
        self._manager = manager
        self.generation = generation

    def __repr__(self) -> str:
        return f"<GenerationTerminals {self.generation} of {self._manager!r}>"

    async def create(self, params: Any) -> dict[str, Any]:
        return await self._manager.create(params, generation=self.generation)

    async def output(self, params: Any) -> dict[str, Any]:
        return await self._manager.output(params, generation=self.generation)

    async def wait_for_exit(self, params: Any) -> dict[str, Any]:
        return await self._manager.wait_for_exit(params, generation=self.generation)

    async def kill(self, params: Any) -> dict[str, Any]:
        return await self._manager.kill(params, generation=self.generation)

    async def release(self, params: Any) -> dict[str, Any]:
        return await self._manager.release(params, generation=self.generation)


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
        request = CreateTerminalRequest.parse(params)
        tg = self._tg
        if tg is None or self._closing.is_set():
            state = "shut down" if self._closing.is_set() else "not running"
            raise _error(ErrorCode.INTERNAL_ERROR, f"Terminal manager {state}")
        self._refuse_ended(generation)
        _check_request_text(request)
        cwd = await self._working_directory(request)
        argv = (
            [request.command, *request.args] if request.args else ["/bin/sh", "-c", request.command]
        )
        env = self._environment(request)
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
            process = await self._spawn(argv, cwd, env, request.command)
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
        request = TerminalRequest.parse(params)
        term = self._lookup(request, generation)
        await term.done.wait()
        if (status := term.exit_fields()) is None:  # released before it could exit
            raise _unknown_terminal(request.terminal_id)
        return WaitForTerminalExitResponse(**status).dump()

    async def kill(self, params: Any, *, generation: int = 0) -> dict[str, Any]:
        """``terminal/kill`` -> ``{}``; the terminal stays valid and its output readable."""
        term = self._lookup(TerminalRequest.parse(params), generation)
        with anyio.CancelScope(shield=True):
            await self._stop(term)
            # The output may still be draining; report the exit once it has.
            with anyio.move_on_after(OUTPUT_DRAIN_S + 1):
                await term.done.wait()
        return {}

    async def release(self, params: Any, *, generation: int = 0) -> dict[str, Any]:
        """``terminal/release`` -> ``{}``; stops the command if it runs. The id is then unknown."""
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

    async def _working_directory(self, request: CreateTerminalRequest) -> Path:
        session_cwd = self._cwd_for(request.session_id)
        if session_cwd is None:
            data = {"sessionId": request.session_id, "reason": "unknown_session"}
            raise _error(ErrorCode.RESOURCE_NOT_FOUND, "Unknown session", **data)
        if request.cwd is None:
            return session_cwd
        cwd = request.cwd
        # Abandoned on cancel: a stat on a hung mount must not hold up the request's cancel.
        is_dir = os.path.isabs(cwd) and await anyio.to_thread.run_sync(
            os.path.isdir, cwd, abandon_on_cancel=True
        )
        if not is_dir:
            message = "cwd must be an absolute path to an existing directory"
            raise _error(ErrorCode.INVALID_PARAMS, message, cwd=cwd, reason="bad_cwd")
        return Path(cwd)

    def _environment(self, request: CreateTerminalRequest) -> dict[str, str] | None:
        if not request.env:
            return self._base_env
        if self._base_env is None:
            message = "This client does not support env for terminal commands"
            raise _error(ErrorCode.INVALID_PARAMS, message, reason="env_not_supported")
        return {**self._base_env, **{var.name: var.value for var in request.env}}

    @staticmethod
    async def _spawn(
        argv: list[str], cwd: Path, env: dict[str, str] | None, command: str
    ) -> Process:
        try:
            return await anyio.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            error = exc.strerror or type(exc).__name__
            message = f"Could not start {command!r}: {error}"
            data = {"command": command, "reason": "spawn_failed", "error": error}
            raise _error(ErrorCode.INVALID_PARAMS, message, **data) from exc

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
        """SIGTERM, bounded wait, SIGKILL what is left (module docstring). Call shielded.

        Bounded as a whole, too: the psutil scans run in worker threads, abandoned if a scan
        itself hangs (a /proc read can, behind a process stuck in the kernel).
        """
        bound = self._term_grace_s + self._kill_wait_s + _SCAN_ALLOWANCE_S
        with anyio.move_on_after(bound) as scope:
            await self._signal_until_gone(term)
        if scope.cancelled_caught:
            log.error("terminal %s (pid %d): not stopped within %.1fs", term.id, term.pid, bound)

    async def _signal_until_gone(self, term: _Terminal) -> None:
        snapshot = []
        if term.process.returncode is None:
            snapshot = await _in_thread(killer.tree_snapshot, term.pid)
        steps = ((signal.SIGTERM, self._term_grace_s), (signal.SIGKILL, self._kill_wait_s))
        for sig, grace in steps:
            survivors = await _in_thread(_survivors, term.pid, snapshot)
            if term.process.returncode is not None and not survivors:
                return
            log.debug("terminal %s: sending %s", term.id, sig.name)
            killer.signal_group(term.pid, sig)
            killer.signal_processes(survivors, sig)
            with anyio.move_on_after(grace):
                await term.process.wait()
                while await _in_thread(_survivors, term.pid, snapshot):  # noqa: ASYNC110
                    await anyio.sleep(_SURVIVOR_POLL_S)
        left = await _in_thread(_survivors, term.pid, snapshot)
        if term.process.returncode is None or left:
            log.error("terminal %s (pid %d): processes survived SIGKILL", term.id, term.pid)

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
