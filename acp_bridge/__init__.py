"""acp-bridge: a supervising bridge between ACP clients and ACP agents.

The public API is importable from here, in three levels (the README's "Public API" lists them):

* **A supervised agent**: one agent kept alive across crashes, its sessions and their turns,
  and the events that report on them.
* **A conversation**: the durable FIFO queue of user messages, one turn each, on a supervised
  agent.
* **Low level**: one agent process, and one JSON-RPC connection, without supervision.

And the one exception tree, rooted in :class:`BridgeError`, for all three. Names are loaded on
first use, so ``import acp_bridge`` stays cheap (the CLI's ``--help`` has a 150 ms budget) and
never imports anyio, pydantic, litellm or the official ACP SDK::

    from acp_bridge import AgentSpec, ClientOptions, open_supervised_agent

    async with open_supervised_agent(AgentSpec(["my-agent", "--acp"])) as agent:
        session = await agent.new_session(Path.cwd())
        async with session.prompt("fix the tests") as turn:
            async for event in turn:
                ...
        response = await turn.wait()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from acp_bridge.version import __version__

# Each public name -> the module that defines it (its one home), in the order of __all__.
_EXPORTS = {
    # -- a supervised agent -------------------------------------------------------------------
    "open_supervised_agent": "acp_bridge.client.supervisor",
    "SupervisedAgent": "acp_bridge.client.supervisor",
    "AgentSpec": "acp_bridge.process.spec",
    "ClientOptions": "acp_bridge.client.options",
    "RestartPolicy": "acp_bridge.process.policy",
    "ShutdownTimeouts": "acp_bridge.process.launcher",
    "PermissionPolicy": "acp_bridge.client.permissions",
    "PermissionMode": "acp_bridge.client.permissions",
    "ElicitationHandler": "acp_bridge.client.elicitation",
    "ElicitationRequest": "acp_bridge.wire.elicitation",
    "ElicitationResponse": "acp_bridge.wire.elicitation",
    "Session": "acp_bridge.client.session",
    "Turn": "acp_bridge.client.turn",
    "TurnTimings": "acp_bridge.core.turn_machine",
    "TurnOutcome": "acp_bridge.core.turn_machine",
    "TurnStatus": "acp_bridge.core.turn_machine",
    "EndedBy": "acp_bridge.core.turn_machine",
    "PromptResponse": "acp_bridge.wire.acp",
    # its events: agent.subscribe() (the lifecycle), iterating a turn (the rest)
    "AgentStarted": "acp_bridge.client.events",
    "AgentExited": "acp_bridge.client.events",
    "AgentRestarting": "acp_bridge.client.events",
    "AgentGaveUp": "acp_bridge.client.events",
    "SessionRestored": "acp_bridge.client.events",
    "SessionReplaced": "acp_bridge.client.events",
    "UpdateReceived": "acp_bridge.client.events",
    "PermissionDecided": "acp_bridge.client.events",
    "ToolCallClosed": "acp_bridge.client.events",
    # -- a conversation -----------------------------------------------------------------------
    "open_conversation": "acp_bridge.conversation.opening",
    "Conversation": "acp_bridge.conversation.conversation",
    "QueueStore": "acp_bridge.conversation.store",
    "Store": "acp_bridge.conversation.store_api",
    "ConversationRecord": "acp_bridge.conversation.records",
    "MessageRecord": "acp_bridge.conversation.queue_states",
    "MessageState": "acp_bridge.conversation.queue_states",
    "TurnPolicy": "acp_bridge.client.turn",
    "UsageTotals": "acp_bridge.conversation.usage",
    # -- low level ----------------------------------------------------------------------------
    "open_agent": "acp_bridge.process.launcher",
    "AgentProcess": "acp_bridge.process.launcher",
    "JsonRpcPeer": "acp_bridge.rpc.peer",
    # -- errors (every level) -----------------------------------------------------------------
    "BridgeError": "acp_bridge.errors",
    "RpcError": "acp_bridge.errors",
    "ConnectionClosedError": "acp_bridge.errors",
    "ResourceClosedError": "acp_bridge.errors",
    "AgentError": "acp_bridge.errors",
    "SpawnError": "acp_bridge.errors",
    "AgentStartupError": "acp_bridge.errors",
    "ProtocolVersionError": "acp_bridge.errors",
    "AuthRequiredError": "acp_bridge.errors",
    "AgentExitedError": "acp_bridge.errors",
    "SessionRestoreError": "acp_bridge.errors",
    "RestartLimitError": "acp_bridge.errors",
    "QueueStoreError": "acp_bridge.errors",
}

__all__ = [  # noqa: RUF022  (grouped by level, as _EXPORTS are, not sorted)
    "__version__",
    # a supervised agent
    "open_supervised_agent",
    "SupervisedAgent",
    "AgentSpec",
    "ClientOptions",
    "RestartPolicy",
    "ShutdownTimeouts",
    "PermissionPolicy",
    "PermissionMode",
    "ElicitationHandler",
    "ElicitationRequest",
    "ElicitationResponse",
    "Session",
    "Turn",
    "TurnTimings",
    "TurnOutcome",
    "TurnStatus",
    "EndedBy",
    "PromptResponse",
    "AgentStarted",
    "AgentExited",
    "AgentRestarting",
    "AgentGaveUp",
    "SessionRestored",
    "SessionReplaced",
    "UpdateReceived",
    "PermissionDecided",
    "ToolCallClosed",
    # a conversation
    "open_conversation",
    "Conversation",
    "QueueStore",
    "Store",
    "ConversationRecord",
    "MessageRecord",
    "MessageState",
    "TurnPolicy",
    "UsageTotals",
    # low level
    "open_agent",
    "AgentProcess",
    "JsonRpcPeer",
    # errors
    "BridgeError",
    "RpcError",
    "ConnectionClosedError",
    "ResourceClosedError",
    "AgentError",
    "SpawnError",
    "AgentStartupError",
    "ProtocolVersionError",
    "AuthRequiredError",
    "AgentExitedError",
    "SessionRestoreError",
    "RestartLimitError",
    "QueueStoreError",
]

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ loads them
    from acp_bridge.client.elicitation import ElicitationHandler
    from acp_bridge.client.events import (
        AgentExited,
        AgentGaveUp,
        AgentRestarting,
        AgentStarted,
        PermissionDecided,
        SessionReplaced,
        SessionRestored,
        ToolCallClosed,
        UpdateReceived,
    )
    from acp_bridge.client.options import ClientOptions
    from acp_bridge.client.permissions import PermissionMode, PermissionPolicy
    from acp_bridge.client.session import Session
    from acp_bridge.client.supervisor import SupervisedAgent, open_supervised_agent
    from acp_bridge.client.turn import Turn, TurnPolicy
    from acp_bridge.conversation.conversation import Conversation
    from acp_bridge.conversation.opening import open_conversation
    from acp_bridge.conversation.queue_states import MessageRecord, MessageState
    from acp_bridge.conversation.records import ConversationRecord
    from acp_bridge.conversation.store import QueueStore
    from acp_bridge.conversation.store_api import Store
    from acp_bridge.conversation.usage import UsageTotals
    from acp_bridge.core.turn_machine import EndedBy, TurnOutcome, TurnStatus, TurnTimings
    from acp_bridge.errors import (
        AgentError,
        AgentExitedError,
        AgentStartupError,
        AuthRequiredError,
        BridgeError,
        ConnectionClosedError,
        ProtocolVersionError,
        QueueStoreError,
        ResourceClosedError,
        RestartLimitError,
        RpcError,
        SessionRestoreError,
        SpawnError,
    )
    from acp_bridge.process.launcher import AgentProcess, ShutdownTimeouts, open_agent
    from acp_bridge.process.policy import RestartPolicy
    from acp_bridge.process.spec import AgentSpec
    from acp_bridge.rpc.peer import JsonRpcPeer
    from acp_bridge.wire.acp import PromptResponse
    from acp_bridge.wire.elicitation import ElicitationRequest, ElicitationResponse


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acp_bridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
