"""``acp-bridge attach``: an editor's agent command, relayed to the conversation host.

The editor speaks ACP on our stdin/stdout; the host speaks it on its socket (or a WebSocket,
``--host URL``: the token from ``--token-file`` read with ``host.tokens.load_token``, a
``wss://`` host verified against ``--ca-file`` or the system's trust store; a refused token or
certificate is one line and exit 2). attach copies lines both ways as they are, one line in
hand per direction (the bound; a slow side slows the other, nothing piles up here), except
that a ``session/new`` gets the agent choice in ``_meta.acpBridge`` (``agent`` for ``--agent
NAME``, ``agentCommand`` for ``-- CMD``) when the editor named none.

Finding the host: the socket (``--socket``, else the default beside the store or under
``$XDG_RUNTIME_DIR``) is greeted first (``initialize`` + ``_acp_bridge/hello`` on a connection
of its own), so a host of another store is refused before the editor's traffic goes anywhere.
When nothing listens there, attach starts a host, ``python -m acp_bridge serve
--exit-when-idle S --socket P --store S [--agent NAME | -- CMD]``, detached (its own session,
stdin and stdout on /dev/null, stderr appended to ``host.log`` beside the socket, 0600), and
waits for it to answer (``--startup-timeout``), saying so on stderr. Two attaches that start a
host at once are fine: one host binds the socket, the other sees it taken and exits, and both
attaches reach the first.

The end: the editor closing stdin detaches: once the host has answered the requests the editor
had sent (:class:`~acp_bridge.host.client.OutstandingRequests`; at most ``DETACH_GRACE_S``),
attach closes its connection and exits 0; the editor closing stdout detaches at once. The
conversation goes on in the host. The host closing the connection ends attach with one line on
stderr, exit 3: the editor restarts its agent command, and its ``session/load`` gets the
conversation back from the host.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final

import anyio
import psutil

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_OK, EXIT_USAGE
from acp_bridge.cli.verb_owner import VerbFailed, host_socket, run_verb, say, store_path
from acp_bridge.errors import ConnectionClosedError, FramingError, UnsafeFileError
from acp_bridge.host.client import (
    CONNECT_TIMEOUT_S,
    Endpoint,
    HostFailedError,
    NoHostError,
    OutstandingRequests,
    RelayTargetGoneError,
    connect_host,
    open_endpoint_stream,
    relay_lines,
    with_agent_choice,
)
from acp_bridge.host.endpoint import HostEndpointError, prepare_socket_dir
from acp_bridge.host.tokens import load_token
from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream
from acp_bridge.safe_files import open_regular

__all__ = ["attach_command"]

HOST_LOG_NAME: Final = "host.log"
_POLL_S: Final = 0.05
"""How often a starting host's socket is tried (a connect attempt costs microseconds)."""
_PROGRESS_EVERY_S: Final = 2.0
DETACH_GRACE_S: Final = 5.0
"""After the editor's end of input, how long the host's answers to the requests it had already
sent are waited for (attach exits as soon as they are all answered)."""


def attach_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    command = list(args.agent_cmd or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if args.agent and command:
        parser.error("attach: give either --agent NAME or -- CMD, not both")
    if args.host and args.socket:
        parser.error("attach: --host URL and --socket PATH name two hosts; give one")
    if args.token_file and not args.host:
        parser.error("attach: --token-file goes with --host URL")
    if args.ca_file and not args.host:
        parser.error("attach: --ca-file goes with --host URL")
    if args.host and not args.host.startswith(("ws://", "wss://")):
        parser.error(f"attach: --host must be a ws:// or wss:// URL, not {args.host!r}")
    token = _read_token(Path(args.token_file)) if args.token_file else None
    if isinstance(token, int):
        return token
    store = store_path(args)
    if args.host:
        ca_file = Path(args.ca_file) if args.ca_file else None
        endpoint = Endpoint(url=args.host, token=token, ca_file=ca_file)
    else:
        endpoint = Endpoint(socket=host_socket(args, store))
    attach = _Attach(args, store, endpoint, command)
    return run_verb("attach", attach.run)


def _read_token(path: Path) -> str | int:
    """The bearer token in ``path`` (a private file: host/tokens.load_token), or the exit
    code after one line on stderr."""
    try:
        return load_token(path)
    except UnsafeFileError as exc:
        say("attach", f"--token-file: {exc}")
    except OSError as exc:
        say("attach", f"--token-file {path}: {exc.strerror or exc}")
    return EXIT_USAGE


class _Attach:
    def __init__(
        self, args: argparse.Namespace, store: Path, endpoint: Endpoint, command: list[str]
    ) -> None:
        self.args = args
        self.store = store
        self.endpoint = endpoint
        self.command = command

    async def run(self) -> int:
        if self.endpoint.socket is not None:
            await self._ensure_host(self.endpoint.socket)
        try:
            with anyio.fail_after(CONNECT_TIMEOUT_S):
                stream = await open_endpoint_stream(self.endpoint)
        except TimeoutError:
            raise VerbFailed(
                f"connecting to {self.endpoint} took over {CONNECT_TIMEOUT_S:g} s",
                EXIT_AGENT_FAILED,
            ) from None
        editor_in, editor_out = FdReceiveStream(0), FdSendStream(1)
        choice = None
        if self.args.agent or self.command:
            choice = partial(with_agent_choice, agent=self.args.agent, command=self.command)
        pending = OutstandingRequests()

        def to_host(line: bytes) -> bytes:
            return pending.sent(choice(line) if choice is not None else line)

        ends: list[tuple[str, BaseException | None]] = []
        try:
            async with anyio.create_task_group() as tg:

                async def editor_to_host() -> None:
                    error = await _relay(editor_in, stream, to_host)
                    ends.append(("editor", error))
                    if error is None and len(pending):
                        # The editor closed stdin: detach once the host has answered what it
                        # had already asked (bounded; the host's end ends it sooner).
                        with anyio.move_on_after(DETACH_GRACE_S):
                            await pending.wait_answered()
                    tg.cancel_scope.cancel()

                async def host_to_editor() -> None:
                    ends.append(("host", await _relay(stream, editor_out, pending.received)))
                    tg.cancel_scope.cancel()

                tg.start_soon(editor_to_host)
                tg.start_soon(host_to_editor)
        finally:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
                await editor_in.aclose()
                await editor_out.aclose()
        return self._outcome(ends[0] if ends else ("editor", None))

    def _outcome(self, end: tuple[str, BaseException | None]) -> int:
        side, error = end
        editor_left = (side == "editor" and not isinstance(error, RelayTargetGoneError)) or (
            side == "host" and isinstance(error, RelayTargetGoneError)
        )
        if editor_left:
            return EXIT_OK  # detached: the conversation goes on in the host
        if isinstance(error, FramingError):
            say("attach", f"a line over the size bound: {error}; the connection was closed")
            return EXIT_AGENT_FAILED
        say(
            "attach",
            f"the host on {self.endpoint} closed the connection; the conversation goes on "
            "there (restart the agent in the editor: its session/load gets it back)",
        )
        return EXIT_AGENT_FAILED

    # -- finding or starting the host ------------------------------------------------------------

    async def _ensure_host(self, socket: Path) -> None:
        """Greet the host on ``socket`` (refusing one of another store); start one if none
        listens, and wait until it answers."""
        if await self._greets(socket):
            return
        try:
            prepare_socket_dir(socket.parent)
        except HostEndpointError as exc:
            raise VerbFailed(f"cannot start a host: {exc}") from None
        log_path = socket.parent / HOST_LOG_NAME
        pid = await self._start_host(socket, log_path)
        say("attach", f"starting a host on {socket} (pid {pid}, log {log_path})")
        started = anyio.current_time()
        deadline = started + self.args.startup_timeout
        next_note = started + _PROGRESS_EVERY_S
        while anyio.current_time() < deadline:
            if await self._greets(socket):
                say("attach", "the host is ready")
                return
            if not _running(pid):
                if await self._greets(socket):  # it lost the race to a host started meanwhile
                    say("attach", "a host started meanwhile is ready")
                    return
                raise VerbFailed(
                    f"the host exited before it listened; see {log_path}: {_tail(log_path)}",
                    EXIT_AGENT_FAILED,
                )
            await anyio.sleep(_POLL_S)
            if anyio.current_time() >= next_note:
                waited = anyio.current_time() - started
                say("attach", f"still waiting for the host to listen ({waited:.0f} s)")
                next_note += _PROGRESS_EVERY_S
        raise VerbFailed(
            f"the host did not listen on {socket} within {self.args.startup_timeout:g} s "
            f"(--startup-timeout); see {log_path}",
            EXIT_AGENT_FAILED,
        )

    async def _greets(self, socket: Path) -> bool:
        try:
            async with connect_host(Endpoint(socket=socket), store=self.store):
                return True
        except NoHostError:
            return False
        except HostFailedError as exc:
            raise VerbFailed(str(exc), EXIT_AGENT_FAILED) from None

    async def _start_host(self, socket: Path, log_path: Path) -> int:
        """Start ``serve`` detached, and return its pid.

        The host is started through a short-lived launcher process that exits at once, so the
        host is not a descendant of ``attach``: a client that stops its agent's whole process
        tree (acpx SIGTERMs every process it saw descend from its agent) stops ``attach``, never
        the host and the conversations it serves."""
        argv = [
            sys.executable,
            "-m",
            "acp_bridge",
            "serve",
            "--exit-when-idle",
            f"{self.args.exit_when_idle:g}",
            "--socket",
            str(socket),
            "--store",
            str(self.store),
        ]
        if self.args.agent:
            argv += ["--agent", self.args.agent]
        elif self.command:
            argv += ["--", *self.command]
        try:
            log_fd = open_regular(str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        except (OSError, UnsafeFileError) as exc:
            raise VerbFailed(f"cannot open the host's log {log_path}: {exc}") from None
        try:
            launched = await anyio.run_process(
                [sys.executable, "-c", _LAUNCHER, *argv],
                stdin=subprocess.DEVNULL,
                stderr=log_fd,
                check=False,
            )
        except OSError as exc:
            raise VerbFailed(f"cannot start a host: {exc}", EXIT_AGENT_FAILED) from None
        finally:
            os.close(log_fd)
        try:
            return int(launched.stdout)
        except ValueError:
            raise VerbFailed(
                f"cannot start a host (status {launched.returncode}); see {log_path}: "
                f"{_tail(log_path)}",
                EXIT_AGENT_FAILED,
            ) from None


_LAUNCHER: Final = (
    "import subprocess, sys\n"
    "host = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,"
    " start_new_session=True)\n"
    "print(host.pid)\n"
)
"""Runs ``serve`` in a session of its own (the editor's signals and hangups are not the host's)
and exits, leaving the host to the system: stderr (the host's log) is inherited."""


def _running(pid: int) -> bool:
    """Whether the host ``pid`` still runs (a zombie waiting for its reaper does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def _relay(
    source: anyio.abc.ByteReceiveStream,
    sink: anyio.abc.ByteSendStream,
    rewrite: Callable[[bytes], bytes],
) -> BaseException | None:
    """Relay until ``source`` ends: None, or the error that ended it."""
    try:
        await relay_lines(source, sink, rewrite=rewrite)
    except (ConnectionClosedError, FramingError) as exc:
        return exc
    return None


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(unreadable)"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else "(empty)"
    return last[-limit:]
