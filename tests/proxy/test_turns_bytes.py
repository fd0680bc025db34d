"""The prompts queued behind running turns, bounded in bytes (issue 20, defect 2). Pure: no
processes, no clock.

The bound counts every session's queue together: a prompt is queued while fewer bytes wait,
so one prompt of any size fits and at most the bound plus one prompt waits; the next one is
refused, with a message naming the proxy's option. Whatever ends a queued prompt (forwarded,
cancelled, lost, answered gone) gives its bytes back.
"""

from __future__ import annotations

from acp_bridge.proxy.turns import (
    QUEUE_FULL,
    AnswerCancelled,
    ForwardPrompt,
    PromptTurns,
    QueuedPrompt,
    RefuseQueueFull,
    TurnsAction,
)


def _prompt(request_id: int, size: int, session_id: str = "s") -> QueuedPrompt:
    return QueuedPrompt(session_id, request_id, b"p" * size)


def _refused_for_bytes(actions: list[TurnsAction]) -> bool:
    return (
        len(actions) == 1
        and isinstance(actions[0], RefuseQueueFull)
        and "--max-buffer-bytes" in actions[0].message
    )


def test_prompts_queue_while_fewer_bytes_wait_than_the_bound() -> None:
    turns = PromptTurns(5.0, max_queued_bytes=1000)
    turns.prompt(_prompt(1, 10), now=0)  # in flight: not queued, not counted
    assert turns.prompt(_prompt(2, 600), now=0) == []
    assert turns.prompt(_prompt(3, 600), now=0) == []  # 600 waited: still room
    assert turns.queued_bytes == 1200
    assert _refused_for_bytes(turns.prompt(_prompt(4, 1), now=0))
    other = turns.prompt(_prompt(5, 10, "other"), now=0)
    assert other == [ForwardPrompt(_prompt(5, 10, "other"))]  # an idle session is not queued
    assert _refused_for_bytes(turns.prompt(_prompt(6, 1, "other"), now=0))  # every session


def test_one_prompt_larger_than_the_bound_is_queued_when_nothing_waits() -> None:
    turns = PromptTurns(5.0, max_queued_bytes=100)
    turns.prompt(_prompt(1, 10), now=0)
    assert turns.prompt(_prompt(2, 5000), now=0) == []
    assert _refused_for_bytes(turns.prompt(_prompt(3, 1), now=0))


def test_the_count_bound_keeps_its_own_message() -> None:
    turns = PromptTurns(5.0, max_queued=1, max_queued_bytes=1000)
    turns.prompt(_prompt(1, 10), now=0)
    turns.prompt(_prompt(2, 10), now=0)
    assert turns.prompt(_prompt(3, 10), now=0) == [RefuseQueueFull(_prompt(3, 10), QUEUE_FULL)]


def test_every_way_out_of_the_queue_gives_its_bytes_back() -> None:
    turns = PromptTurns(2.0, max_queued_bytes=1000)
    turns.prompt(_prompt(1, 10), now=0)
    turns.prompt(_prompt(2, 300), now=0)
    turns.prompt(_prompt(3, 400), now=0)
    assert turns.queued_bytes == 700
    # Forwarded when the turn before it ends.
    assert turns.answered("s", _prompt(1, 10).key, "end_turn", now=1) == [
        ForwardPrompt(_prompt(2, 300))
    ]
    assert turns.queued_bytes == 400
    # Cancelled with the session's cancel.
    actions = turns.cancel("s", now=2)
    assert AnswerCancelled(_prompt(3, 400)) in actions
    assert turns.queued_bytes == 0
    # Sent back by unsend (the agent never read it), then lost with its session.
    turns.prompt(_prompt(4, 500), now=3)
    turns.unsend(_prompt(2, 300))  # the one in flight never reached the agent
    assert turns.queued_bytes == 800
    turns.cut()
    _actions, refused = turns.resume(now=4, lost=["s"])
    assert [p.id for p in refused] == [2, 4]
    assert turns.queued_bytes == 0
    # Queued again, then cancelled by the grace window's expiry.
    turns.prompt(_prompt(5, 10), now=5)
    turns.prompt(_prompt(6, 900), now=5)
    turns.cancel("s", now=5)
    turns.prompt(_prompt(7, 900), now=6)  # waits behind the cancelled turn
    assert turns.queued_bytes == 900
    turns.tick("s", now=8)
    assert turns.queued_bytes == 0
    # Everything taken when the agent is gone for good.
    turns.prompt(_prompt(8, 10), now=9)
    turns.prompt(_prompt(9, 900), now=9)
    assert [p.id for p in turns.take_everything()] == [9]
    assert turns.queued_bytes == 0
