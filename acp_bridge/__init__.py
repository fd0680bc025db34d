"""acp-bridge: a supervising bridge between ACP clients and ACP agents.

The public API is importable from here. Names are loaded on first use, so ``import acp_bridge``
stays cheap (the CLI's ``--help`` has a 150 ms budget) and never imports litellm or the
official ACP SDK::

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

_EXPORTS = {
    # supervised agents
    "open_supervised_agent": "acp_bridge.client.supervisor",
    "SupervisedAgent": "acp_bridge.client.supervisor",
    "Session": "acp_bridge.client.session",
    "Turn": "acp_bridge.client.turn",
    "ClientOptions": "acp_bridge.client.options",
    "AgentSpec": "acp_bridge.process.spec",
    "RestartPolicy": "acp_bridge.process.policy",
    "ShutdownTimeouts": "acp_bridge.process.launcher",
    "PermissionPolicy": "acp_bridge.client.permissions",
    "PermissionMode": "acp_bridge.client.permissions",
    # events
    "AgentStarted": "acp_bridge.client.events",
    "AgentExited": "acp_bridge.client.events",
    "AgentRestarting": "acp_bridge.client.events",
    "AgentGaveUp": "acp_bridge.client.events",
    "SessionRestored": "acp_bridge.client.events",
    "SessionReplaced": "acp_bridge.client.events",
    "UpdateReceived": "acp_bridge.client.events",
    "PermissionDecided": "acp_bridge.client.events",
    "ToolCallClosed": "acp_bridge.client.events",
    # lower layers
    "JsonRpcPeer": "acp_bridge.rpc.peer",
    "open_agent": "acp_bridge.process.launcher",
    # errors
    "BridgeError": "acp_bridge.errors",
    "RpcError": "acp_bridge.errors",
    "AgentError": "acp_bridge.errors",
    "AgentExitedError": "acp_bridge.errors",
    "AgentStartupError": "acp_bridge.errors",
    "AuthRequiredError": "acp_bridge.errors",
    "ConnectionClosedError": "acp_bridge.errors",
    "ProtocolVersionError": "acp_bridge.errors",
    "ResourceClosedError": "acp_bridge.errors",
    "RestartLimitError": "acp_bridge.errors",
    "SpawnError": "acp_bridge.errors",
}

__all__ = [
    "AgentError",
    "AgentExited",
    "AgentExitedError",
    "AgentGaveUp",
    "AgentRestarting",
    "AgentSpec",
    "AgentStarted",
    "AgentStartupError",
    "AuthRequiredError",
    "BridgeError",
    "ClientOptions",
    "ConnectionClosedError",
    "JsonRpcPeer",
    "PermissionDecided",
    "PermissionMode",
    "PermissionPolicy",
    "ProtocolVersionError",
    "ResourceClosedError",
    "RestartLimitError",
    "RestartPolicy",
    "RpcError",
    "Session",
    "SessionReplaced",
    "SessionRestored",
    "ShutdownTimeouts",
    "SpawnError",
    "SupervisedAgent",
    "ToolCallClosed",
    "Turn",
    "UpdateReceived",
    "__version__",
    "open_agent",
    "open_supervised_agent",
]

if TYPE_CHECKING:
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
    from acp_bridge.client.turn import Turn
    from acp_bridge.errors import (
        AgentError,
        AgentExitedError,
        AgentStartupError,
        AuthRequiredError,
        BridgeError,
        ConnectionClosedError,
        ProtocolVersionError,
        ResourceClosedError,
        RestartLimitError,
        RpcError,
        SpawnError,
    )
    from acp_bridge.process.launcher import ShutdownTimeouts, open_agent
    from acp_bridge.process.policy import RestartPolicy
    from acp_bridge.process.spec import AgentSpec
    from acp_bridge.rpc.peer import JsonRpcPeer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acp_bridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
