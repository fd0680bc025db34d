"""The turn state machine lives in :mod:`acp_bridge.client.turn_machine` (a turn's one owner,
shared by ``Session`` and :class:`~acp_bridge.session.driver.TurnDriver`); its names are
re-exported here for the session layer."""

from acp_bridge.client.turn_machine import (
    ArmGrace,
    CancelUnwritable,
    Close,
    PromptAnswered,
    PromptFailed,
    Quarantine,
    SendCancel,
    Tick,
    TurnAction,
    TurnCancelRequested,
    TurnMachine,
    TurnOutcome,
    TurnState,
    TurnTimings,
    UpdateArrived,
)
from acp_bridge.client.turn_machine import MachineEvent as TurnEvent

__all__ = [
    "ArmGrace",
    "CancelUnwritable",
    "Close",
    "PromptAnswered",
    "PromptFailed",
    "Quarantine",
    "SendCancel",
    "Tick",
    "TurnAction",
    "TurnCancelRequested",
    "TurnEvent",
    "TurnMachine",
    "TurnOutcome",
    "TurnState",
    "TurnTimings",
    "UpdateArrived",
]
