"""What travels on the wire. Pure data and pure functions: no I/O, no anyio.

* :mod:`acp_bridge.wire.jsonrpc` -- JSON-RPC envelopes (hand-checked: it is the hot path).
* :mod:`acp_bridge.wire.base` -- ``WireModel``: camelCase aliases, unknown fields kept, ``_meta``.
* :mod:`acp_bridge.wire.initialize`, :mod:`~acp_bridge.wire.acp`, :mod:`~acp_bridge.wire.content`,
  :mod:`~acp_bridge.wire.updates`, :mod:`~acp_bridge.wire.client_methods` -- pydantic models of the
  ACP messages the bridge inspects or originates. Relayed traffic never goes through them.
* :mod:`acp_bridge.wire.kinds` -- the string enums (tool kinds, permission option kinds...),
  without pydantic.
* :mod:`acp_bridge.wire.methods` -- which params/result model belongs to which method.

Import the submodule you need: this package imports none of them, so that the envelope code does
not pay for the models. Defining the models is cheap (``defer_build``: a model's validator is
built on its first use, and a one-shot ``acp-bridge run`` uses five of them); building all of
them would take about 0.15 s.
"""
