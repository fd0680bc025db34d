"""``acp-bridge run``: headless turns over the conversation layer, for scripts and pipelines.

Messages come from ``-m`` (in order) or from stdin lines (each line is stored and queued as it
is read, so a line typed during a turn waits for it). stdout carries the agent's text, or one
JSON event per line with ``--json``; everything else goes to stderr. SIGINT or SIGTERM cancel
the running turn, stop the agent's whole process tree, and exit 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.cli.render import EventPrinter
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.conversation.conversation import Conversation
from acp_bridge.conversation.opening import open_conversation
from acp_bridge.conversation.reconcile import ConfigMismatchError, reconcile
from acp_bridge.conversation.store import ConversationRecord, QueueStore
from acp_bridge.errors import AgentError, BridgeError, QueueStoreError, SpawnError
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec
from acp_bridge.session.driver import TurnPolicy
from acp_bridge.session.turn import TurnTimings

__all__ = ["run_command"]

EXIT_OK, EXIT_USAGE, EXIT_AGENT, EXIT_TURN, EXIT_INTERRUPTED = 0, 2, 3, 4, 130


def default_store_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "acp-bridge" / "store.db"


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    argv = list(args.agent_cmd)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv and not (args.resume or args.conversation):
        parser.error("run: give the agent command after --, e.g. acp-bridge run -m hi -- my-agent")
    store_path = Path(args.store) if args.store else default_store_path()
    try:
        store_path.parent.mkdir(parents=True, exist_ok=True)
        store = QueueStore.open(store_path)
    except (OSError, QueueStoreError) as exc:
        _say(f"cannot open the store {store_path}: {exc}")
        return EXIT_USAGE
    try:
        record = _conversation(store, args, argv)
    except (ConfigMismatchError, QueueStoreError, ValueError) as exc:
        store.close()
        _say(str(exc))
        return EXIT_USAGE
    spec = AgentSpec(list(argv or record.agent.get("argv", [])), cwd=Path(record.cwd))
    try:
        return anyio.run(_run, args, store, record, spec)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        store.close()


def _conversation(
    store: QueueStore, args: argparse.Namespace, argv: list[str]
) -> ConversationRecord:
    cwd = str(Path(args.cwd).resolve() if args.cwd else Path.cwd())
    record: ConversationRecord | None
    if args.conversation:
        record = store.get_conversation(args.conversation)
        if record is None:
            raise ValueError(f"no stored conversation {args.conversation!r} in {store.path}")
    elif args.resume:
        record = store.latest_conversation()
        if record is None:
            raise ValueError(f"no stored conversation to resume in {store.path}")
    else:
        return store.create_conversation(
            agent={"argv": argv}, cwd=cwd, mcp_servers=[], config={}, now=_now()
        )
    reconcile(
        record,
        cwd=cwd if args.cwd else record.cwd,
        mcp_servers=list(record.mcp_servers),
        history=store.events(record.id),
    )
    return record


async def _run(
    args: argparse.Namespace, store: QueueStore, record: ConversationRecord, spec: AgentSpec
) -> int:
    printer = EventPrinter(json_mode=args.json, agent=spec.name)
    options = ClientOptions(
        permission=_permission(args),
        allow_fs_read=args.allow_fs,
        allow_fs_write=args.allow_fs,
        allow_terminal=args.allow_terminal,
        restart=RestartPolicy(max_restarts=max(0, args.max_restarts)),
        cancel_grace_s=args.grace,
        base_env=dict(os.environ),
        stderr_forward=printer.agent_stderr if args.verbose else None,
    )
    policy = TurnPolicy(
        timings=TurnTimings(
            cancel_grace_s=args.grace,
            idle_timeout_s=args.idle_timeout,
            turn_timeout_s=args.turn_timeout,
        )
    )
    try:
        async with (
            open_supervised_agent(spec, options) as agent,
            open_conversation(
                store, agent, record, policy=policy, session_id=args.session_id
            ) as conversation,
        ):
            return await _drive(conversation, args, printer)
    except SpawnError as exc:
        _say(f"{exc}. Check the agent command.")
        return EXIT_AGENT
    except AgentError as exc:
        _say(str(exc))
        return EXIT_AGENT
    except BridgeError as exc:
        _say(str(exc))
        return EXIT_TURN


async def _drive(
    conversation: Conversation, args: argparse.Namespace, printer: EventPrinter
) -> int:
    events = conversation.subscribe(replay=True)
    seqs: list[int] = []
    interrupted = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(printer.run, events)
        tg.start_soon(_watch_signals, conversation, tg.cancel_scope, interrupted)
        if args.message:
            for text in args.message:
                seqs.append(await conversation.send(text))
        elif not (args.resume or args.conversation) or not sys.stdin.isatty():
            await _read_stdin(conversation, seqs)
        reason = await conversation.wait_idle()
        tg.cancel_scope.cancel()
    await printer.flush()
    if interrupted.is_set():
        _say("interrupted; the agent was stopped")
        return EXIT_INTERRUPTED
    return _exit_code(conversation, reason)


async def _read_stdin(conversation: Conversation, seqs: list[int]) -> None:
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:
            return
        text = line.rstrip("\n")
        if text.strip():
            seqs.append(await conversation.send(text))


async def _watch_signals(
    conversation: Conversation, scope: anyio.CancelScope, interrupted: anyio.Event
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _signum in signals:
            interrupted.set()
            await conversation.stop()
            scope.cancel()
            return


def _exit_code(conversation: Conversation, reason: str) -> int:
    if reason == "agent_gone":
        return EXIT_TURN
    for message in conversation.messages():
        if message.state.name == "FAILED" and not message.recoverable:
            return EXIT_TURN
    return EXIT_OK


def _permission(args: argparse.Namespace) -> PermissionPolicy:
    mode = args.permission or "deny"
    if mode == "ask":
        return PermissionPolicy(PermissionMode.ASK, ask=_ask_on_terminal)
    return PermissionPolicy(PermissionMode(mode))


async def _ask_on_terminal(request: Any) -> str | None:
    """Ask on the controlling terminal (stdin may carry the messages)."""
    options = request.options

    def ask() -> str | None:
        try:
            with open("/dev/tty", "r+", encoding="utf-8") as tty:
                tty.write(f"\nacp-bridge: the agent asks: {request.tool_call.title or 'a tool'}\n")
                for index, option in enumerate(options, 1):
                    tty.write(f"  {index}) {option.name} [{option.kind}]\n")
                tty.write("choose a number (empty: cancel): ")
                tty.flush()
                answer = tty.readline().strip()
        except OSError:
            return None
        if answer.isdigit() and 1 <= int(answer) <= len(options):
            return str(options[int(answer) - 1].option_id)
        return None

    return await anyio.to_thread.run_sync(ask, abandon_on_cancel=True)


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)


def _now() -> float:
    return time.time()
