"""``acp-bridge serve``: the conversation host (see :mod:`acp_bridge.host`).

Every refusal before serving is one line on stderr and exit 2: a socket directory that is not
private and yours, a host already answering on the socket, a store that cannot be opened, and
with ``--listen``: a malformed address, a bind beyond loopback without TLS (unless
``--insecure``), half a TLS pair or one that does not load, a token file that is not a private
file of yours, an address that cannot be bound.

``--listen HOST:PORT`` serves the same host over WebSocket as well
(:mod:`acp_bridge.host.websocket`: every flag is checked by ``plan_listen`` before anything
listens; the listener is one more ``Host.serve_listener``). Once both listeners are bound, the
first stderr line says ``serving ...`` and the next ``listening at URL`` with the port bound
(the one picked, for ``HOST:0``) and the token file's path, never the token.
SIGINT, SIGTERM and SIGHUP stop the host: each running turn is cancelled and recorded (as
``run`` does: the agent is sent ``session/cancel`` and given the grace window), every agent is
stopped, and it exits 0; a second signal stops it at once. ``--exit-when-idle`` exits 0 too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from acp_bridge.cli.conversation_setup import make_private_dir
from acp_bridge.cli.exit_codes import EXIT_OK, EXIT_USAGE
from acp_bridge.cli.named_agents import ResolvedAgent, load_catalog, resolve_agent
from acp_bridge.cli.store_open import (
    is_postgres_url,
    keeping_leases,
    listen_for_sends,
    open_store,
    pg_store,
    store_place,
    store_spec,
)
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.conversation import STOP_NOW_DEADLINE_S
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store_api import Store
from acp_bridge.core.turn_machine import TurnTimings
from acp_bridge.errors import QueueStoreError, UnsafeFileError
from acp_bridge.host.clients import ClientLimits
from acp_bridge.host.conversations import HostSettings
from acp_bridge.host.endpoint import HostEndpointError, default_socket_path
from acp_bridge.host.serve import Host, HostOptions, open_unix_listener
from acp_bridge.host.websocket import (
    ListenPlan,
    WebSocketLimits,
    WebSocketListener,
    plan_listen,
)
from acp_bridge.host.ws_protocol import ListenRefusedError
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec

__all__ = ["serve_command"]

_SHUTDOWN_S = 30.0
"""How long a signal's orderly stop may take (each running turn's grace window, its agent's
stop) before whatever is left is cancelled."""


def serve_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    default = resolve_agent(parser, args, sys.argv[1:], required=False)
    if args.listen is None:
        given = [
            flag
            for flag, value in (
                ("--token-file", args.token_file),
                ("--tls-cert", args.tls_cert),
                ("--tls-key", args.tls_key),
                ("--insecure", args.insecure),
            )
            if value
        ]
        if given:
            parser.error(f"serve: {', '.join(given)} go with --listen HOST:PORT")
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
        plan = _plan(args, store_path) if args.listen is not None else None
        return anyio.run(_serve, args, store, store_path, socket_path, default, plan)
    except (HostEndpointError, ListenRefusedError, UnsafeFileError) as exc:
        _say(str(exc))
        return EXIT_USAGE
    finally:
        store.close()


def default_token_file(store_path: Path) -> Path:
    """``serve --listen``'s token file without ``--token-file``: beside the store."""
    return store_path.with_name(store_path.name + ".token")


def _plan(args: argparse.Namespace, store_path: Path) -> tuple[ListenPlan, bool]:
    """``--listen`` and its flags checked, the token read or made (refusals: exceptions);
    and whether the token was made now."""
    token_file = Path(args.token_file) if args.token_file else default_token_file(store_path)
    existed = token_file.exists()
    plan = plan_listen(
        args.listen,
        token_file=token_file,
        tls_cert=Path(args.tls_cert) if args.tls_cert else None,
        tls_key=Path(args.tls_key) if args.tls_key else None,
        insecure=args.insecure,
    )
    return plan, not existed


async def _open_websocket(plan: ListenPlan, max_clients: int) -> WebSocketListener:
    try:
        return await plan.open_listener(limits=WebSocketLimits(max_connections=max_clients))
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ListenRefusedError(f"--listen {plan.listen}: cannot listen there: {reason}") from exc


async def _serve(
    args: argparse.Namespace,
    store: Store,
    store_path: Path,
    socket_path: Path,
    default: ResolvedAgent,
    planned: tuple[ListenPlan, bool] | None,
) -> int:
    plan, made = planned if planned is not None else (None, False)
    listener = await open_unix_listener(socket_path)  # refusals: HostEndpointError
    try:
        websocket = None if plan is None else await _open_websocket(plan, args.max_clients)
    except BaseException:
        await listener.aclose()
        await anyio.to_thread.run_sync(_unlink, socket_path)
        raise
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
    # The signals are ours before anything is said: whoever reads "serving" may signal us.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        _say(f"serving {store.path} on {socket_path} (pid {os.getpid()})")
        if plan is not None and websocket is not None:
            url = plan.url(websocket.port)
            made_now = ", made now: copy it to the clients" if made else ""
            _say(f"listening at {url} (bearer token in {plan.token_file}{made_now})")
        shared = pg_store(store)
        if shared is not None:  # a lost lease stops that conversation's turn at once
            shared.report_lost_here(lambda lease: host.lease_lost(lease.conversation_id))
        # The heartbeat outlives the task group: its body only starts the host's tasks.
        async with keeping_leases(store), anyio.create_task_group() as tg:
            await listen_for_sends(store, host, tg)

            async def stop_on_signal() -> None:
                async for signum in signals:
                    _say(
                        f"{signal.Signals(signum).name}: stopping (running turns are cancelled "
                        "within the grace window; a second signal stops at once)"
                    )
                    break
                async with anyio.create_task_group() as stopping:

                    async def at_once() -> None:
                        async for signum in signals:
                            _say(f"{signal.Signals(signum).name}: stopping at once")
                            host.stop_now()
                            stopping.cancel_scope.deadline = (
                                anyio.current_time() + STOP_NOW_DEADLINE_S
                            )
                            return

                    stopping.start_soon(at_once)
                    with anyio.move_on_after(_SHUTDOWN_S):
                        await host.shutdown()
                    stopping.cancel_scope.cancel()
                tg.cancel_scope.cancel()

            async def run_host(*, task_status: TaskStatus[None]) -> None:
                try:
                    await host.run(
                        listener, exit_when_idle_s=args.exit_when_idle, task_status=task_status
                    )
                finally:
                    tg.cancel_scope.cancel()

            tg.start_soon(stop_on_signal)
            await tg.start(run_host)
            if websocket is not None:
                host.task_group.start_soon(host.serve_listener, websocket)
    if websocket is not None:
        with anyio.CancelScope(shield=True), contextlib.suppress(OSError):
            await websocket.aclose()  # when the host ended before serving it
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
