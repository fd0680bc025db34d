"""``acp-bridge proxy``: the editor's agent command (see docs/proxy.md).

Reads the editor on fd 0 and writes it on fd 1 (protocol frames only); everything else goes
to stderr or ``--log FILE``. SIGINT, SIGTERM and SIGHUP stop it like the editor's EOF: the
agent tree is stopped gracefully, exit 0; a second signal kills the tree at once.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import anyio

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_USAGE
from acp_bridge.cli.named_agents import resolve_agent
from acp_bridge.core.restore_plan import RestoreBudget
from acp_bridge.errors import SpawnError, UnsafeFileError
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from acp_bridge.proxy.recorder import FLUSH_EVERY_S, MIN_MAX_BYTES, Recorder
from acp_bridge.proxy.relay import ProxyOptions, ProxyRelay
from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream
from acp_bridge.safe_files import open_regular

__all__ = ["proxy_command"]

log = logging.getLogger("acp_bridge.proxy")


def proxy_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    agent = resolve_agent(parser, args, sys.argv[1:])
    if args.mcp:
        parser.error("proxy: --mcp cannot be used: the editor chooses each session's MCP servers")
    if args.redact and not args.record:
        parser.error("proxy: --redact needs --record FILE")
    if args.record_max_bytes < MIN_MAX_BYTES:
        parser.error(f"proxy: --record-max-bytes must be at least {MIN_MAX_BYTES}")
    verbosity = getattr(args, "verbose", 0) or 0
    try:
        _configure_logging(args.log, verbosity)
    except OSError as exc:
        print(f"acp-bridge proxy: cannot open the log {args.log}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except UnsafeFileError as exc:
        print(f"acp-bridge proxy: cannot use the log {exc}", file=sys.stderr)
        return EXIT_USAGE
    if agent.mcp_servers:
        log.warning(
            "agent %s: its configured MCP servers are not used by the proxy (the editor "
            "chooses each session's MCP servers)",
            agent.name,
        )
    spec = AgentSpec(
        list(agent.argv),
        name=agent.name or "",
        cwd=Path(args.cwd) if args.cwd else None,
        env=agent.env,
    )
    options = ProxyOptions(
        grace_s=args.grace,
        queueing=not args.no_queue,
        startup_timeout_s=args.startup_timeout,
        restore=RestoreBudget(args.restore_timeout, args.restore_concurrency),
        max_line_bytes=args.max_message_bytes,
        policy=RestartPolicy(max_restarts=args.max_restarts),
        max_in_flight=args.max_in_flight,
        max_buffer_bytes=args.max_buffer_bytes,
    )
    recorder = None
    if args.record:
        try:
            recorder = Recorder(
                args.record, redact_secrets=args.redact, max_bytes=args.record_max_bytes
            )
        except OSError as exc:
            print(f"acp-bridge proxy: cannot open {args.record}: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
    _widen_pipe(1)
    agent_log = logging.getLogger(f"acp_bridge.agent.{spec.name}")
    editor_in, editor_out = FdReceiveStream(0), FdSendStream(1)
    relay = ProxyRelay(
        spec,
        editor_in,
        editor_out,
        options=options,
        recorder=recorder,
        base_env=os.environ,
        stderr_forward=lambda line: agent_log.warning("%s", line),
    )
    try:
        # The event loop: asyncio; ACP_BRIDGE_PROXY_BACKEND=trio runs the same relay on trio
        # (the tests drive the proxy on both).
        backend = os.environ.get("ACP_BRIDGE_PROXY_BACKEND", "asyncio")
        code = anyio.run(_serve, relay, recorder, backend=backend)
    except SpawnError as exc:  # pragma: no cover - reported by the relay already
        print(f"acp-bridge proxy: {exc}", file=sys.stderr)
        return EXIT_AGENT_FAILED
    finally:
        if recorder is not None:
            recorder.close()  # idempotent: the relay closes it on its way out already
        # The descriptors go back to blocking mode (they are the process's, not ours).
        for stream in (editor_in, editor_out):
            with contextlib.suppress(OSError, ValueError):
                os.set_blocking(stream.fileno(), True)
    if relay.failure is not None:
        print(f"acp-bridge proxy: {relay.failure}", file=sys.stderr)
    return code


async def _serve(relay: ProxyRelay, recorder: Recorder | None) -> int:
    async with anyio.create_task_group() as tg:

        async def flush_recording(recording: Recorder) -> None:
            while True:
                await anyio.sleep(FLUSH_EVERY_S)
                recording.flush()

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as sigs:
                seen = 0
                async for signum in sigs:
                    seen += 1
                    name = signal.Signals(signum).name
                    if seen == 1:
                        log.info("got %s; stopping the agent", name)
                        relay.stop()
                    else:  # a second signal: do not wait for the agent's graceful exit
                        log.info("got %s again; killing the agent now", name)
                        relay.kill_now()

        tg.start_soon(watch_signals)
        if recorder is not None:
            tg.start_soon(flush_recording, recorder)
        code = await relay.run()
        tg.cancel_scope.cancel()
    return code


def _widen_pipe(fd: int) -> None:
    """Give the pipe to the editor a 1 MiB buffer where Linux allows it (F_SETPIPE_SZ): a
    burst of updates then goes out in fewer, larger writes, each waking the editor once."""
    import fcntl

    set_pipe_size = getattr(fcntl, "F_SETPIPE_SZ", 1031)
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, set_pipe_size, 1 << 20)


def _configure_logging(path: str | None, verbosity: int) -> None:
    """Logs never go to stdout (it carries protocol frames). The agent's stderr lines are
    logged at WARNING as ``acp_bridge.agent.<name>``, so they show by default."""
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler: logging.Handler = logging.StreamHandler(sys.stderr)
    if path:  # a regular file only (a FIFO would block the open), created 0600: logs hold prompts
        fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        handler = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8"))
    handler.setFormatter(logging.Formatter("acp-bridge proxy: %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
