"""Answering the agent's ``elicitation/create`` (acp-protocol.md section 5; docs/elicitation.md).

An :class:`ElicitationHandler` in :class:`~acp_bridge.client.options.ClientOptions` answers the
agent's questions; the modes it names (``form``, ``url``) are advertised in
``clientCapabilities.elicitation`` and nothing else. Without a handler nothing is advertised.

A request in a mode that is not advertised (no handler at all included) is answered -32602, as
the protocol says for an unadvertised mode: never left unanswered. A request the handler is
still answering when its turn is cancelled is answered ``cancel`` (as a permission request is
answered ``cancelled``). ``elicitation/complete`` goes to the handler's ``on_complete``; unknown
ids are the handler's to ignore.

:func:`declining` is the unattended policy (``run``): decline every request, and tell someone
what was asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from acp_bridge.record import record

if TYPE_CHECKING:
    from acp_bridge.wire.elicitation import ElicitationRequest, ElicitationResponse

__all__ = ["AnswerCallback", "ElicitationHandler", "declining"]

AnswerCallback = Callable[["ElicitationRequest"], Awaitable["ElicitationResponse"]]
"""Answers one request (``accept`` with content, ``decline`` or ``cancel``); cancelling it
answers ``cancel``."""


@record
class ElicitationHandler:
    """Who answers the agent's elicitations, and in which modes."""

    answer: AnswerCallback
    form: bool = True
    """Advertise and answer ``mode: "form"``."""
    url: bool = True
    """Advertise and answer ``mode: "url"``."""
    on_complete: Callable[[dict[str, Any]], None] | None = None
    """Called with the params of each ``elicitation/complete`` (the url-mode interaction is
    done). Runs in the reader: it must not block."""

    def answers(self, mode: str) -> bool:
        return (mode == "form" and self.form) or (mode == "url" and self.url)

    def capabilities(self) -> dict[str, Any]:
        """``clientCapabilities.elicitation``: each mode answered, as ``{}``."""
        modes: dict[str, Any] = {}
        if self.form:
            modes["form"] = {}
        if self.url:
            modes["url"] = {}
        return modes


def declining(
    on_declined: Callable[[ElicitationRequest], None] | None = None,
) -> ElicitationHandler:
    """Decline every request (form and url), calling ``on_declined`` with each first."""

    async def decline(request: ElicitationRequest) -> ElicitationResponse:
        from acp_bridge.wire.elicitation import ElicitationResponse

        if on_declined is not None:
            on_declined(request)
        return ElicitationResponse.decline()

    return ElicitationHandler(decline)
