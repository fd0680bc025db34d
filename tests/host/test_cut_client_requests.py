"""A client the host cut off is refused everything it asks until its connection closes: it stays
connected only to be told why (tests/host/test_host_bounds.py shows that with a real deaf
client). Here the endpoint's methods are registered on a peer that only records them, so each
handler is called directly, before and after the cut."""

from __future__ import annotations

from typing import Any

import pytest

from acp_bridge.errors import RpcError
from acp_bridge.host.acp_server import serve_methods
from acp_bridge.host.clients import Client, ClientLimits

pytestmark = pytest.mark.anyio


class Registry:
    """The registration side of a peer: what the endpoint registers, kept to be called."""

    def __init__(self) -> None:
        self.requests: dict[str, Any] = {}
        self.other: Any = None

    def on_request(self, name: str, handler: Any) -> None:
        self.requests[name] = handler

    def on_other_requests(self, handler: Any) -> None:
        self.other = handler

    def on_notification(self, name: str, handler: Any) -> None:
        pass

    def on_other_notifications(self, handler: Any) -> None:
        pass

    # what the client's outbox may ask of its connection (never written here)
    def can_send_lines_now(self) -> bool:
        return False


class NoConversations:
    def listing(self) -> list[dict[str, Any]]:
        return []

    def find(self, conversation_id: str) -> Any:
        raise RpcError(-32602, f"no conversation {conversation_id}")


async def test_every_request_of_a_cut_client_is_refused_with_the_reason() -> None:
    registry = Registry()
    client = Client(7, registry, ClientLimits())  # type: ignore[arg-type]
    serve_methods(registry, client, NoConversations())  # type: ignore[arg-type]
    assert await registry.requests["session/list"]({}) == {"sessions": []}

    client.cut_off("the client fell behind: its outbox passed 100 bytes")
    for name in ("session/list", "session/prompt", "_acp_bridge/watch", "session/load"):
        with pytest.raises(RpcError) as refused:
            await registry.requests[name]({"sessionId": "x", "prompt": []})
        assert "cut off: the client fell behind" in str(refused.value), name
        assert "reattach from your cursor" in str(refused.value)
    with pytest.raises(RpcError, match="cut off"):  # relayed methods too
        await registry.other("session/unknown_extension", {"sessionId": "x"})
