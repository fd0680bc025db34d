"""The built-in reference agent: ``acp-bridge agent`` (install the ``agent`` extra).

It speaks ACP on stdio through acp-bridge's own :mod:`acp_bridge.rpc` and :mod:`acp_bridge.wire`
layers and answers with any model litellm knows. It runs in its own process, on asyncio only
(litellm is asyncio-only).

Nothing here is imported by ``import acp_bridge`` or by the CLI's parser, and litellm itself is
imported only inside the agent process, after stdout has been taken away from it
(:mod:`.runtime`). This package imports none of its submodules.

Modules: :mod:`.config` (settings), :mod:`.runtime` (stdout guard, lazy litellm),
:mod:`.server` (the JSON-RPC methods), :mod:`.sessions` (in-memory session state),
:mod:`.store` (SQLite history), :mod:`.turn` (the model -> tools loop), :mod:`.tools` and
:mod:`.tool_runner` (tools through the client), :mod:`.model` (streaming, retries),
:mod:`.provider_errors`, :mod:`.usage`, :mod:`.mock_script` and :mod:`.mock_provider`
(offline models).
"""
