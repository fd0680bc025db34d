"""Finding the conversation a CLI command works on, and owning it: shared by ``run`` and ``chat``.

:func:`claim_conversation` opens the store (created mode 0600 in a 0700 directory: it holds
prompts), picks the conversation (a new one; ``--conversation ID``; or ``--resume``, the latest
one of this cwd and agent whose agent started), reconciles it with what is asked now (cwd, MCP
servers), and takes its owner lock (one process per conversation). Every refusal is one line on
stderr and exit 2.

It expects the options ``run`` and ``chat`` both define: ``--store``, ``--cwd``,
``--conversation`` and ``--resume``. :func:`client_options` and :func:`turn_policy` build the
agent's and the turns' settings from the flags they share.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_bridge.cli.exit_codes import EXIT_USAGE
from acp_bridge.cli.named_agents import ResolvedAgent
from acp_bridge.cli.options import default_state_dir, default_store_path
from acp_bridge.cli.owner import ConversationBusyError, ConversationOwner
from acp_bridge.cli.store_open import is_postgres_url, open_store, pg_store, store_spec
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.permissions import PermissionPolicy
from acp_bridge.client.turn import TurnPolicy
from acp_bridge.conversation.reconcile import reconcile
from acp_bridge.conversation.records import ConversationRecord
from acp_bridge.conversation.store_api import Store, iter_events
from acp_bridge.core.turn_machine import TurnTimings
from acp_bridge.errors import ConfigMismatchError, QueueStoreError, UnsafeFileError
from acp_bridge.process.policy import RestartPolicy
from acp_bridge.process.spec import AgentSpec

__all__ = [
    "ClaimedConversation",
    "agent_spec",
    "claim_conversation",
    "client_options",
    "default_state_dir",
    "default_store_path",
    "make_private_dir",
    "turn_policy",
]


@dataclass
class ClaimedConversation:
    """An open store and a conversation this process owns until :meth:`release`."""

    store: Store
    record: ConversationRecord
    owner: ConversationOwner | None
    """The SQLite store's owner lock; None on PostgreSQL, where the store holds the
    conversation's lease (released when the store closes)."""

    def release(self) -> None:
        self.store.close()
        if self.owner is not None:
            self.owner.release()


def claim_conversation(
    args: argparse.Namespace, agent: ResolvedAgent, *, verbose: bool = False
) -> ClaimedConversation | int:
    """The conversation ``args`` names, owned by this process; or an exit code (2), the reason
    said on stderr."""
    try:
        spec = store_spec(args.store)
        if not is_postgres_url(spec):
            make_private_dir(Path(spec).parent)
        store = open_store(spec, durability=getattr(args, "durability", "process"))
    except (OSError, QueueStoreError) as exc:
        text = str(exc)  # one line that names the store once (a URL's without its password)
        named = is_postgres_url(spec) or spec in text
        _say(text if named else f"cannot open the store {spec}: {text}")
        return EXIT_USAGE
    try:
        record = _conversation(store, args, agent)
    except (ConfigMismatchError, QueueStoreError, ValueError) as exc:
        store.close()
        _say(str(exc))
        return EXIT_USAGE
    owned = _own(store, Path(spec), record.id)
    if isinstance(owned, str):
        store.close()
        _say(owned)
        return EXIT_USAGE
    owner = owned
    if store.get_conversation(record.id) is None:  # pruned between the lookup and the lock
        store.close()
        if owner is not None:
            owner.release()
        _say(f"conversation {record.id} was removed (pruned) meanwhile; nothing was sent")
        return EXIT_USAGE
    if verbose:
        _say(f"conversation {record.id} (cwd {record.cwd})")
    servers = _mcp_servers_now(agent, record)
    if servers != list(record.mcp_servers):  # reconciled above; owned now, so ours to change
        record = store.update_conversation(record.id, mcp_servers=servers, now=time.time())
    return ClaimedConversation(store, record, owner)


def _own(store: Store, store_path: Path, conversation_id: str) -> ConversationOwner | str | None:
    """Own the conversation before anything reads or recovers its messages: its lease on
    PostgreSQL (None), else the owner lock next to the SQLite file; or why not (a line)."""
    shared = pg_store(store)
    if shared is not None:
        try:
            shared.own(conversation_id)
        except QueueStoreError as exc:
            return str(exc)
        return None
    owner = ConversationOwner(store_path, conversation_id)
    try:
        owner.acquire()
    except (ConversationBusyError, UnsafeFileError) as exc:
        return str(exc)
    except (OSError, ValueError) as exc:
        return f"cannot lock conversation {conversation_id} ({owner.path}): {exc}"
    return owner


def agent_spec(agent: ResolvedAgent, record: ConversationRecord) -> AgentSpec:
    """The agent to start: the one given now, else the conversation's stored command."""
    return AgentSpec(
        list(agent.argv or record.agent.get("argv", [])),
        name=agent.name or "",
        cwd=Path(record.cwd),
        env=agent.env,
    )


def client_options(
    args: argparse.Namespace,
    permission: PermissionPolicy,
    stderr_forward: Callable[[str], None] | None,
    on_capability_refused: Callable[[str], None] | None = None,
) -> ClientOptions:
    """The supervised agent's options from the flags ``run`` and ``chat`` share."""
    return ClientOptions(
        permission=permission,
        on_capability_refused=on_capability_refused,
        allow_fs_read=args.allow_fs,
        allow_fs_write=args.allow_fs,
        allow_terminal=args.allow_terminal,
        restart=RestartPolicy(max_restarts=args.max_restarts),
        cancel_grace_s=args.grace,
        startup_timeout_s=args.startup_timeout,
        auth_method=args.auth_method,
        base_env=dict(os.environ),
        stderr_forward=stderr_forward,
    )


def turn_policy(args: argparse.Namespace) -> TurnPolicy:
    """Each turn's cancel grace and deadlines from ``--grace``, ``--idle-timeout`` and
    ``--turn-timeout``."""
    return TurnPolicy(
        timings=TurnTimings(
            cancel_grace_s=args.grace,
            idle_timeout_s=args.idle_timeout,
            turn_timeout_s=args.turn_timeout,
        )
    )


def make_private_dir(directory: Path) -> None:
    """Create ``directory`` mode 0700 (whatever the umask) if it is missing; an existing one
    keeps its mode. The store and the chat history hold prompts."""
    if directory.is_dir():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        return  # another process made it first: its mode is its creator's
    directory.chmod(0o700)


def _conversation(
    store: Store, args: argparse.Namespace, agent: ResolvedAgent
) -> ConversationRecord:
    argv = agent.argv
    cwd = str(Path(args.cwd).resolve() if args.cwd else Path.cwd())  # checked by argparse
    record: ConversationRecord | None
    if args.conversation:
        record = store.get_conversation(args.conversation)
        if record is None:
            raise ValueError(f"no stored conversation {args.conversation!r} in {store.path}")
    elif args.resume:
        record = store.latest_resumable(cwd, argv or None)
        if record is None:
            raise ValueError(_nothing_to_resume(store, cwd, argv))
    else:
        named = {"name": agent.name} if agent.name else {}
        return store.create_conversation(
            agent={"argv": argv, **named},
            cwd=cwd,
            mcp_servers=agent.mcp_servers,
            config={},
            now=time.time(),
        )
    reconcile(
        record,
        cwd=cwd,  # without --cwd, the current directory: never quietly somewhere else
        mcp_servers=_mcp_servers_now(agent, record),
        history=iter_events(store, record.id),  # read only if a server was removed
    )
    return record


def _mcp_servers_now(agent: ResolvedAgent, record: ConversationRecord) -> list[dict[str, Any]]:
    """The MCP servers this process's sessions get: the ones given now (the named agent's,
    --mcp). Continuing a conversation with no agent and no --mcp given keeps its stored ones."""
    if agent.argv or agent.mcp_servers:
        return list(agent.mcp_servers)
    return list(record.mcp_servers)


def _nothing_to_resume(store: Store, cwd: str, argv: list[str]) -> str:
    agent = f" and the agent {' '.join(argv)}" if argv else ""
    text = (
        f"no stored conversation to resume for {cwd}{agent} in {store.path} (only "
        "conversations whose agent started a session can be resumed)"
    )
    elsewhere = store.latest_resumable(None, argv or None)
    if elsewhere is not None:
        text += (
            f"; the latest for this agent, {elsewhere.id}, was started in {elsewhere.cwd} "
            f"(continue it there, or with --conversation {elsewhere.id} --cwd {elsewhere.cwd})"
        )
    return text


def _say(text: str) -> None:
    print(f"acp-bridge: {text}", file=sys.stderr, flush=True)
