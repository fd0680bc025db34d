"""``acp-bridge serve``: the conversation host (see :mod:`acp_bridge.host`).

Every refusal before serving is one line on stderr and exit 2: a socket directory that is not
private and yours, a host already answering on the socket, a store that cannot be opened.
SIGINT, SIGTERM and SIGHUP stop the host: each running turn is cancelled and recorded (as
``run`` does), every agent is stopped, and it exits 0. ``--exit-when-idle`` exits 0 too.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.cli.conversation_setup import make_private_dir
from acp_bridge.cli.exit_codes import EXIT_OK, EXIT_USAGE
from acp_bridge.cli.named_agents import ResolvedAgent, load_catalog, resolve_agent
from acp_bridge.cli.store_open import (
    is_postgres_url,
    keeping_leases,
    listen_for_sends,
    open_store,
    store_place,
    store_spec,
)
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store_api import Store
from acp_bridge.core.turn_machine import TurnTimings
from acp_bridge.errors import QueueStoreError, UnsafeFileError
from acp_bridge.host.clients import ClientLimits
from acp_bridge.host.conversations import HostSettings
from acp_bridge.host.endpoint import HostEndpointError, default_socket_path
from acp_bridge.host.serve import Host, HostOptions, open_unix_listener
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec

__all__ = ["serve_command"]


def serve_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    default = resolve_agent(parser, args, sys.argv[1:], required=False)
    spec = store_spec(args.store)
    shared = is_postgres_url(spec)
    # A PostgreSQL store has no file: its socket goes beside a place of its own (store_place).
    store_path = store_place(spec)
    socket_path = Path(args.socket) if args.socket else default_socket_path(store_path)
    try:
        make_private_dir(store_path.parent)
        store = open_store(spec)
    except (OSError, QueueStoreError, UnsafeFileError) as exc:
        text = str(exc)
        _say(text if shared or spec in text else f"cannot open the store {spec}: {text}")
        return EXIT_USAGE
    try:
        return anyio.run(_serve, args, store, store_path, socket_path, default)
    except HostEndpointError as exc:
        _say(str(exc))
        return EXIT_USAGE
    finally:
        store.close()


async def _serve(
    args: argparse.Namespace,
    store: Store,
    store_path: Path,
    socket_path: Path,
    default: ResolvedAgent,
) -> int:
    listener = await open_unix_listener(socket_path)  # refusals: HostEndpointError
    host = Host(
        store,
        store_path,
        _settings(args, default),
        socket_path=socket_path,
        options=HostOptions(
            limits=ClientLimits(outbox_bytes=args.client_outbox_bytes, stall_s=args.client_stall),
            max_clients=args.max_clients,
            max_in_flight=args.max_in_flight,
        ),
        new_agent=lambda name: _new_agent(args, default, name),
    )
    _say(f"serving {store.path} on {socket_path} (pid {os.getpid()})")
    async with anyio.create_task_group() as tg, keeping_leases(store):
        await listen_for_sends(store, host, tg)

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as got:
                async for signum in got:
                    _say(f"{signal.Signals(signum).name}: stopping")
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        try:
            await host.run(listener, exit_when_idle_s=args.exit_when_idle)
        finally:
            tg.cancel_scope.cancel()
    if args.exit_when_idle is not None:
        _say(f"no client and nothing to do for {args.exit_when_idle:g} s; exiting")
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(_unlink, socket_path)
    return EXIT_OK


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError as exc:
        logging.getLogger(__name__).debug("could not remove %s: %s", path, exc)


def _settings(args: argparse.Namespace, default: ResolvedAgent) -> HostSettings:
    def spec_for(record: ConversationRecord) -> AgentSpec:
        argv = list(record.agent.get("argv") or default.argv)
        if not argv:
            raise ValueError(f"conversation {record.id} names no agent command")
        name = str(record.agent.get("name") or "")
        env = dict(default.env) if name == (default.name or "") else {}
        return AgentSpec(argv, name=name, cwd=Path(record.cwd), env=env)

    def options_for(policy: PermissionPolicy) -> ClientOptions:
        return ClientOptions(
            permission=policy,
            allow_fs_read=args.allow_fs,
            allow_fs_write=args.allow_fs,
            allow_terminal=args.allow_terminal,
            restart=RestartPolicy(max_restarts=args.max_restarts),
            cancel_grace_s=args.grace,
            startup_timeout_s=args.startup_timeout,
            base_env=dict(os.environ),
        )

    return HostSettings(
        spec_for,
        options_for,
        policy=TurnPolicy(timings=TurnTimings(cancel_grace_s=args.grace)),
        permission=PermissionMode(args.permission),
        agent_idle_s=args.agent_idle,
    )


def _new_agent(
    args: argparse.Namespace, default: ResolvedAgent, name: str | None
) -> dict[str, Any]:
    """The stored agent of a new conversation: the one a client named, else the host's."""
    if name:
        from acp_bridge.cli.agent_config import ConfigError

        try:
            entry = load_catalog(args.config, args.registry).agents.get(name)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if entry is None or not entry.argv:
            raise ValueError(f"no agent named {name!r} (see acp-bridge agents)")
        return {"argv": list(entry.argv), "name": name}
    if not default.argv:
        raise ValueError(
            "this host has no default agent (serve -- CMD or --agent NAME); name one in "
            "_meta.acpBridge.agent"
        )
    return {"argv": list(default.argv), **({"name": default.name} if default.name else {})}


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)
