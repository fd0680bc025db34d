"""A turn's event stream is released whichever way the turn is left."""

from __future__ import annotations

import gc
import sys
import warnings
from typing import Any

import pytest

from acp_bridge.client.turn import Turn
from acp_bridge.session.turn import TurnTimings
from acp_bridge.wire.acp import PromptAnswer

pytestmark = pytest.mark.anyio

CHUNK = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "late"}}


def unraisable_when_collected(turn: list[Turn]) -> list[Any]:
    """What collecting the (only) reference to the turn reports: an unclosed stream's
    ResourceWarning, made an error, surfaces as an unraisable exception."""
    seen: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            turn.clear()
            gc.collect()
    finally:
        sys.unraisablehook = previous
    return [str(hook.exc_value) for hook in seen]


async def test_a_turn_left_before_its_agent_side_ended_leaves_no_stream_open() -> None:
    """``Session.end`` closes the turn the caller left. If the agent's side never ended (the
    process's exit report cut off by a teardown), nothing else ever closes the turn's sending
    end: before the fix the collector warned about an unclosed MemoryObjectSendStream."""
    turn = Turn("s", timings=TurnTimings())
    turn.close()
    await turn.deliver_update(dict(CHUNK))  # a late update: dropped, no error
    assert unraisable_when_collected([turn]) == []


async def test_a_late_answer_after_close_still_ends_the_turn() -> None:
    turn = Turn("s", timings=TurnTimings())
    turn.close()
    turn.finish_now(PromptAnswer.read({"stopReason": "cancelled"}))
    assert turn.stop_reason == "cancelled"
    assert turn.machine.outcome is not None and turn.machine.outcome.status == "done"
    assert (await turn.wait()).is_cancelled()
