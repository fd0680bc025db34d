"""Answering ``session/request_permission`` from a policy (acp-protocol.md sections 5 and 7).

The agent offers options such as ``[{optionId, name, kind}]`` and the client answers with one
``optionId`` or with the outcome ``cancelled``. Decisions here follow three rules:

* **An option is picked by its kind, never by its position.** Agents order options as they
  like (Claude Code puts ``allow_always`` first, others lead with a reject). Allowing prefers
  ``allow_once`` over ``allow_always`` (grant no more than this one call); rejecting prefers
  ``reject_once`` over ``reject_always`` (do not make a standing rule the user never saw).
* **No option of the wanted kind means cancelled.** A deny never falls back to an allow option
  (and an allow never falls back to a reject): ``cancelled`` is the one answer that grants
  nothing and invents nothing. Options of kinds this version does not know are never picked
  automatically.
* **Unattended means deny.** :attr:`PermissionMode.DENY` is the default; ``ask`` without a
  callback denies; a callback answering an id that was not offered counts as cancelled.

Modes:

``ask``
    Call the ``ask`` callback, which returns the chosen ``optionId`` or None (cancelled).
``deny``
    Reject every tool call.
``allow-reads``
    Allow tool calls whose ``kind`` is in :data:`READ_ONLY_TOOL_KINDS` (``read``, ``search``,
    ``think``: they look but change nothing and reach nothing outside the machine; ``fetch`` is
    left out because it talks to the network). Everything else, including a call with no kind or
    a kind this version does not know, is rejected.
``allow-all``
    Allow every tool call.

:meth:`PermissionPolicy.decide_with_record` also returns a :class:`PermissionDecision`, a
plain record a caller can log or emit as an event.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal

from acp_bridge.record import record
from acp_bridge.wire.kinds import PermissionOptionKind, ToolKind

if TYPE_CHECKING:
    from acp_bridge.wire.client_methods import (
        PermissionOption,
        RequestPermissionRequest,
        RequestPermissionResponse,
    )

__all__ = [
    "READ_ONLY_TOOL_KINDS",
    "AskCallback",
    "PermissionDecision",
    "PermissionMode",
    "PermissionPolicy",
    "Want",
    "choose_option",
]

log = logging.getLogger(__name__)


class PermissionMode(StrEnum):
    """How permission requests are answered. :attr:`DENY` is the unattended default."""

    ASK = "ask"
    DENY = "deny"
    ALLOW_READS = "allow-reads"
    ALLOW_ALL = "allow-all"


READ_ONLY_TOOL_KINDS: Final[frozenset[str]] = frozenset(
    {ToolKind.READ, ToolKind.SEARCH, ToolKind.THINK}
)
"""The tool kinds ``allow-reads`` lets through: local, side-effect-free work."""

Want = Literal["allow", "reject"]

AskCallback = Callable[["RequestPermissionRequest"], Awaitable[str | None]]
"""Asks a human: returns the chosen ``optionId``, or None when the user cancelled."""

# Preference order per wish: the narrowest grant (or refusal) first.
_PREFERENCE: Final[dict[Want, tuple[PermissionOptionKind, ...]]] = {
    "allow": (PermissionOptionKind.ALLOW_ONCE, PermissionOptionKind.ALLOW_ALWAYS),
    "reject": (PermissionOptionKind.REJECT_ONCE, PermissionOptionKind.REJECT_ALWAYS),
}


def choose_option(options: Iterable[PermissionOption], want: Want) -> PermissionOption | None:
    """The option to answer with when we ``want`` to allow or reject, chosen by kind.

    Allow prefers ``allow_once`` then ``allow_always``; reject prefers ``reject_once`` then
    ``reject_always``. Among options of the same kind the first offered wins. None when no
    option has a wanted kind (the caller then answers ``cancelled``).
    """
    offered = list(options)
    for kind in _PREFERENCE[want]:
        for option in offered:
            if option.kind == kind:
                return option
    return None


@record
class PermissionDecision:
    """What was decided for one permission request, for logs and events.

    ``option_id``/``option_kind`` are None when the answer was ``cancelled``.
    """

    session_id: str
    tool_call_id: str
    tool_kind: str | None
    mode: PermissionMode
    option_id: str | None
    option_kind: str | None

    @property
    def is_cancelled(self) -> bool:
        return self.option_id is None

    @property
    def is_allowed(self) -> bool:
        return self.option_kind in _PREFERENCE["allow"]


@record
class PermissionPolicy:
    """Answers permission requests according to ``mode`` (see the module docstring).

    ``ask`` is only consulted in :attr:`PermissionMode.ASK`; without it that mode denies.
    """

    mode: PermissionMode = PermissionMode.DENY
    ask: AskCallback | None = None

    async def decide(self, request: RequestPermissionRequest) -> RequestPermissionResponse:
        """The response to send for ``request``."""
        response, _ = await self.decide_with_record(request)
        return response

    async def decide_with_record(
        self, request: RequestPermissionRequest
    ) -> tuple[RequestPermissionResponse, PermissionDecision]:
        """The response to send, plus a record of the decision.

        Raises:
            Whatever the ``ask`` callback raises (cancellation included).
        """
        # Imported here: the request models are not needed until an agent asks permission.
        from acp_bridge.wire.client_methods import RequestPermissionResponse

        option = await self._pick(request)
        tool_kind = request.tool_call.kind
        record = PermissionDecision(
            session_id=request.session_id,
            tool_call_id=request.tool_call.tool_call_id,
            tool_kind=None if tool_kind is None else str(tool_kind),
            mode=self.mode,
            option_id=None if option is None else option.option_id,
            option_kind=None if option is None else str(option.kind),
        )
        if option is None:
            return RequestPermissionResponse.cancelled(), record
        return RequestPermissionResponse.selected(option.option_id), record

    async def _pick(self, request: RequestPermissionRequest) -> PermissionOption | None:
        if self.mode is PermissionMode.ASK:
            return await self._ask(request)
        return choose_option(request.options, self._want(request))

    def _want(self, request: RequestPermissionRequest) -> Want:
        if self.mode is PermissionMode.ALLOW_ALL:
            return "allow"
        if self.mode is PermissionMode.ALLOW_READS and request.tool_call.kind in (
            READ_ONLY_TOOL_KINDS
        ):
            return "allow"
        return "reject"

    async def _ask(self, request: RequestPermissionRequest) -> PermissionOption | None:
        if self.ask is None:
            return choose_option(request.options, "reject")
        chosen = await self.ask(request)
        if chosen is None:
            return None
        for option in request.options:
            if option.option_id == chosen:
                return option
        log.warning(
            "permission prompt for tool call %s answered %r, which was not offered; "
            "answering cancelled",
            request.tool_call.tool_call_id,
            chosen,
        )
        return None
