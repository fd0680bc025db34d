"""Why an agent never became ready, in words a user can act on (pure: no I/O).

People point the bridge at commands that are not ACP agents (``cat``, a script that prints a
banner, a server waiting on a socket) or at agents that need a flag. The raw failure ("Method
not found", "the peer stopped reading") says nothing about that. :class:`StartupWitness` watches
the raw lines of the first exchange; :func:`diagnose_start` turns what it saw, the failure and
the exit into one clause that completes "<agent> could not be started: it ...".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from acp_bridge.errors import ProtocolVersionError, RpcError

__all__ = ["StartupWitness", "diagnose_start"]

_SHOWN_CHARS: Final = 60
_KEPT_OUTBOUND: Final = 4
"""Startup writes initialize (and maybe authenticate): only the first few lines are kept."""


@dataclass
class StartupWitness:
    """An observer of raw frames (see :data:`acp_bridge.rpc.peer.Observer`) while the agent
    starts. Keeps a bounded amount: the first few outbound lines, one foreign line, counts."""

    inbound_lines: int = 0
    echoed: bool = False
    foreign_line: bytes | None = None
    """The first inbound line that is not a JSON object or array."""

    def __post_init__(self) -> None:
        self._outbound: list[bytes] = []

    def __call__(self, direction: str, line: bytes) -> None:
        stripped = line.strip()
        if direction == "out":
            if len(self._outbound) < _KEPT_OUTBOUND:
                self._outbound.append(stripped)
            return
        if not stripped:
            return
        self.inbound_lines += 1
        if stripped in self._outbound:
            self.echoed = True
        elif self.foreign_line is None and stripped[:1] not in (b"{", b"["):
            self.foreign_line = stripped[: _SHOWN_CHARS * 4]


def diagnose_start(
    failure: BaseException,
    witness: StartupWitness,
    *,
    exit_description: str | None,
    timeout_s: float,
    step: str = "initialize",
) -> str:
    """What the command did, as a clause after "could not be started: it".

    ``exit_description`` says how the process ended when it ended by itself ("exited with code
    0"), and is ``None`` when the bridge stopped it (then how it died says nothing). ``step``
    is the request that was under way (``initialize``, then ``authenticate``).
    """
    if exit_description is not None and exit_description.startswith("killed"):
        exit_description = f"was {exit_description}"  # "it was killed by SIGKILL"
    ended = f", then {exit_description}" if exit_description else ""
    if isinstance(failure, ProtocolVersionError):
        version = failure.agent_version
        return (
            f"speaks ACP protocol version {version}, and acp-bridge speaks 1{ended}; use a "
            "release of the agent that speaks version 1"
        )
    if witness.echoed:
        return (
            f"echoed our initialize request back instead of answering it{ended}; is this an "
            "ACP agent? Some agents need a flag to speak ACP on stdio (e.g. --acp)"
        )
    if witness.foreign_line is not None:
        shown = witness.foreign_line.decode("utf-8", "replace")
        if len(shown) > _SHOWN_CHARS:
            shown = shown[:_SHOWN_CHARS] + "..."
        return (
            f"wrote {shown!r} on stdout, which is not a JSON-RPC message{ended}; is this an "
            "ACP agent? An agent must keep stdout for protocol frames only"
        )
    if isinstance(failure, TimeoutError):
        if witness.inbound_lines == 0:
            return (
                f"wrote nothing on stdout within {timeout_s:g} s of our initialize request; is "
                "this an ACP agent? If it is only slow to start, raise the startup timeout"
            )
        return (
            f"did not answer initialize within {timeout_s:g} s; if it is only slow to start, "
            "raise the startup timeout"
        )
    if isinstance(failure, RpcError):
        return f"answered {step} with an error: {failure}{ended}"  # its data too
    if exit_description and witness.inbound_lines == 0:
        return f"{exit_description} before answering initialize, without writing on stdout"
    return f"failed during {step}: {failure}{ended}"
