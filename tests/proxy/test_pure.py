"""The proxy's pure parts, without processes: frames, id tables, the prompt queue and cancel
grace, the session registry, redaction and the replay script."""

from __future__ import annotations

import json

import pytest

from acp_bridge.proxy.frames import FrameKind, parse_line
from acp_bridge.proxy.redact import MASK, redact
from acp_bridge.proxy.registry import EditorSessions
from acp_bridge.proxy.routing import AgentRequests, EditorRequests, PendingEditorRequest
from acp_bridge.proxy.script import Divergence, ReplayScript, load_exchanges
from acp_bridge.proxy.turns import (
    AnswerCancelled,
    ArmGraceTimer,
    ForwardPrompt,
    PromptTurns,
    QuarantineAgent,
    QueuedPrompt,
    RefuseQueueFull,
)


def _prompt(request_id: int, session_id: str = "s") -> QueuedPrompt:
    return QueuedPrompt(session_id, request_id, b"line-%d" % request_id)


def test_frames_parse_only_what_routing_needs() -> None:
    update = parse_line(b'{"jsonrpc":"2.0","method":"session/update","params":{}}')
    assert update.kind is FrameKind.NOTIFICATION and update.message is None  # not parsed
    answer = parse_line(b'{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}')
    assert (answer.kind, answer.id, answer.stop_reason) == (FrameKind.RESPONSE, 3, "cancelled")
    request = parse_line(b'{"id":"x","method":"session/prompt","params":{"sessionId":"s1"}}')
    assert (request.kind, request.session_id) == (FrameKind.REQUEST, "s1")
    assert parse_line(b"[1,2]").kind is FrameKind.BATCH
    for bad in (b"\xff\xfe", b"[" * 5000, b"1" * 5000, b"not json", b"42"):
        assert parse_line(bad).kind is FrameKind.INVALID
    assert parse_line(b'{"id":1}').kind is FrameKind.INVALID  # neither request nor response


def test_prompts_queue_per_session_in_order() -> None:
    turns = PromptTurns(5.0)
    assert turns.prompt(_prompt(1), now=0) == [ForwardPrompt(_prompt(1))]
    assert turns.prompt(_prompt(2), now=0) == []
    assert turns.prompt(_prompt(3), now=0) == []
    assert turns.prompt(_prompt(4, "other"), now=0) == [ForwardPrompt(_prompt(4, "other"))]
    assert turns.answered("s", _prompt(1).key, "end_turn", now=1) == [ForwardPrompt(_prompt(2))]
    assert turns.answered("s", _prompt(2).key, None, now=2) == [ForwardPrompt(_prompt(3))]
    assert turns.answered("s", _prompt(3).key, "end_turn", now=3) == []
    assert not turns.is_busy("s")


def test_no_queue_forwards_every_prompt_and_the_queue_is_bounded() -> None:
    free = PromptTurns(5.0, queueing=False)
    assert free.prompt(_prompt(2), now=0) == [ForwardPrompt(_prompt(2))]
    assert free.prompt(_prompt(3), now=0) == [ForwardPrompt(_prompt(3))]
    bounded = PromptTurns(5.0, max_queued=1)
    bounded.prompt(_prompt(1), now=0)
    assert bounded.prompt(_prompt(2), now=0) == []
    assert bounded.prompt(_prompt(3), now=0) == [RefuseQueueFull(_prompt(3))]


def test_cancel_grace_quarantines_and_cancels_what_is_queued() -> None:
    turns = PromptTurns(2.0)
    turns.prompt(_prompt(1), now=0)
    turns.prompt(_prompt(2), now=0)
    actions = turns.cancel("s", now=10)
    assert actions == [AnswerCancelled(_prompt(2)), ArmGraceTimer("s", 12.0)]
    assert turns.cancel("s", now=11) == []  # a second cancel is harmless
    turns.prompt(_prompt(3), now=11)  # sent during the grace window: waits
    assert turns.tick("s", now=11.9) == []
    actions = turns.tick("s", now=12.0)
    assert isinstance(actions[0], QuarantineAgent)  # first: fence the agent, then answer
    assert actions[1:] == [AnswerCancelled(_prompt(1)), AnswerCancelled(_prompt(3))]
    assert turns.tick("s", now=20) == []


def test_an_answer_within_the_grace_window_runs_the_next_prompt() -> None:
    turns = PromptTurns(2.0)
    turns.prompt(_prompt(1), now=0)
    turns.cancel("s", now=1)
    turns.prompt(_prompt(2), now=1.5)
    assert turns.answered("s", _prompt(1).key, "end_turn", now=2) == [ForwardPrompt(_prompt(2))]
    assert turns.tick("s", now=3.1) == []  # the new turn was never cancelled


def test_a_crash_cuts_turns_in_flight_and_keeps_the_queue() -> None:
    turns = PromptTurns(2.0)
    turns.prompt(_prompt(1), now=0)
    turns.prompt(_prompt(2), now=0)
    turns.prompt(_prompt(3, "lost"), now=0)
    turns.prompt(_prompt(4, "lost"), now=0)
    assert turns.cut() == [_prompt(1), _prompt(3, "lost")]
    actions, refused = turns.resume(now=1, lost=["lost"])
    assert actions == [ForwardPrompt(_prompt(2))] and refused == [_prompt(4, "lost")]



def test_a_prompt_the_agent_never_got_goes_first_after_the_restore() -> None:
    turns = PromptTurns(2.0)
    turns.prompt(_prompt(1), now=0)
    turns.prompt(_prompt(2), now=0)  # queued behind 1
    turns.unsend(_prompt(1))  # its write was refused: the agent never saw it
    assert not turns.is_busy("s") and turns.queued("s") == 2
    assert turns.cut() == []  # nothing in flight for the exit to cut
    actions, refused = turns.resume(now=1)
    assert actions == [ForwardPrompt(_prompt(1))] and refused == []
    assert turns.answered("s", _prompt(1).key, "end_turn", now=2) == [ForwardPrompt(_prompt(2))]


def test_a_prompt_never_overtakes_one_waiting_for_the_restore() -> None:
    """Review finding: a prompt sent back by unsend waits for resume() with nothing in flight;
    a prompt arriving meanwhile went straight to the agent, ahead of it."""
    turns = PromptTurns(2.0)
    turns.prompt(_prompt(1), now=0)
    turns.unsend(_prompt(1))
    assert turns.prompt(_prompt(2), now=0) == []  # behind 1
    actions, _refused = turns.resume(now=1)
    assert actions == [ForwardPrompt(_prompt(1))]
    unqueued = PromptTurns(2.0, queueing=False)
    unqueued.prompt(_prompt(1), now=0)
    unqueued.unsend(_prompt(1))
    assert unqueued.prompt(_prompt(2), now=0) == [
        ForwardPrompt(_prompt(1)),
        ForwardPrompt(_prompt(2)),
    ]


def test_prompts_sent_back_together_keep_their_order() -> None:
    turns = PromptTurns(2.0, queueing=False)
    turns.prompt(_prompt(1), now=0)
    turns.prompt(_prompt(2), now=0)
    turns.unsend(_prompt(1), _prompt(2))
    actions, _refused = turns.resume(now=1)
    assert actions == [ForwardPrompt(_prompt(1))]  # one at a time after a restore, in order
    assert turns.answered("s", _prompt(1).key, "end_turn", now=2) == [ForwardPrompt(_prompt(2))]

def test_agent_requests_reach_the_editor_under_ids_no_process_can_reuse() -> None:
    table = AgentRequests()
    first = table.add(1, 0, "session/request_permission")
    assert first.editor_id == "acp-bridge/agent-1" and first.agent_id == 0
    assert table.orphan_generation(1) == [first]
    second = table.add(2, 0, "fs/read_text_file")  # generation 2 reuses the agent's id 0
    assert second.editor_id == "acp-bridge/agent-2"
    assert table.take("int:0") is None  # the editor never saw the agent's own id
    assert table.take(f"str:{first.editor_id!r}") is None  # the dead agent's late answer
    assert table.is_orphan(f"str:{second.editor_id!r}") is False
    assert table.editor_id(2, 0) == second.editor_id  # the agent's $/cancel_request maps too
    assert table.take(f"str:{second.editor_id!r}") == second
    assert table.editor_id(2, 0) is None
    editors = EditorRequests()
    editors.add(PendingEditorRequest(1, "session/new", None, 1, {}))
    editors.add(PendingEditorRequest(2, "session/list", None, 2, {}))
    assert [r.id for r in editors.take_generation(1)] == [1] and len(editors) == 1


def test_the_orphans_are_bounded_the_oldest_forgotten_first() -> None:
    table = AgentRequests(max_orphans=3)
    for generation in (1, 2):
        for agent_id in range(4):
            table.add(generation, agent_id, "session/request_permission")
        table.orphan_generation(generation)
        assert table.orphans == 3  # never more than the bound, however many die
    assert table.take("int:0") is None and table.orphans == 3  # forgotten: nothing taken


def test_the_registry_plans_restores_and_remembers_lost_sessions() -> None:
    registry = EditorSessions()
    caps = {"agentCapabilities": {"loadSession": True, "sessionCapabilities": {"resume": {}}}}
    registry.answered("initialize", {"protocolVersion": 1}, None, caps)
    registry.answered("session/new", {"cwd": "/a", "mcpServers": []}, None, {"sessionId": "s1"})
    registry.answered("session/load", {"cwd": "/b", "sessionId": "s2"}, "s2", None)
    registry.answered("session/new", {"cwd": "/c", "mcpServers": []}, None, {"sessionId": "s3"})
    registry.answered("session/close", {"sessionId": "s3"}, "s3", {})
    fork = {"sessionId": "s1", "cwd": "/d", "mcpServers": []}
    registry.answered("session/fork", fork, "s1", {"sessionId": "s4"})
    plan = registry.plan()
    assert [(s.record.session_id, s.methods) for s in plan] == [
        ("s1", ("session/load", "session/resume")),
        ("s2", ("session/load", "session/resume")),
        ("s4", ("session/load", "session/resume")),
    ]
    assert plan[1].record.restore_params() == {"sessionId": "s2", "cwd": "/b", "mcpServers": []}
    for mode in ("ask", "code"):
        registry.answered("session/set_mode", {"sessionId": "s1", "modeId": mode}, "s1", {})
    option = {"sessionId": "s1", "configId": "model", "value": "large"}
    registry.answered("session/set_config_option", option, "s1", {})
    assert registry.plan()[0].settings == (
        ("session/set_mode", {"sessionId": "s1", "modeId": "code"}),
        ("session/set_config_option", option),
    )
    registry.mark_lost("s1", "session/load failed")
    assert registry.lost_reason("s1") == "session/load failed" and "s1" not in registry


def test_redaction_masks_env_values_secret_keys_and_tokens() -> None:
    message = {
        "mcpServers": [{"name": "x", "env": [{"name": "HOME", "value": "/root"}]}],
        "headers": [{"name": "Authorization", "value": "Bearer abc"}],
        "apiKey": "plain",
        "text": "use sk-abcdefghijklmnopqrstu and ghp_abcdefghijklmnopqrstuvwxyz now",
        "count": 3,
    }
    masked = redact(message)
    assert masked["mcpServers"][0]["env"][0] == {"name": "HOME", "value": MASK}
    assert masked["headers"][0]["value"] == MASK and masked["apiKey"] == MASK
    assert masked["text"] == f"use {MASK} and {MASK} now" and masked["count"] == 3


def _entry(direction: str, message: dict[str, object]) -> str:
    return json.dumps({"t": 0, "dir": direction, "msg": message})


def test_the_replay_script_answers_in_order_under_live_ids() -> None:
    lines = [
        _entry("editor->bridge", {"id": 9, "method": "initialize"}),
        _entry("bridge->agent", {"id": 9, "method": "initialize"}),
        _entry("agent->bridge", {"id": 9, "result": {"protocolVersion": 1}}),
        _entry("bridge->agent", {"id": 10, "method": "session/prompt"}),
        _entry("agent->bridge", {"method": "session/update", "params": {}}),
        _entry("agent->bridge", {"id": "a1", "method": "session/request_permission"}),
        _entry("bridge->agent", {"id": "a1", "result": {}}),
        _entry("agent->bridge", {"id": 10, "result": {"stopReason": "end_turn"}}),
    ]
    script = ReplayScript(load_exchanges(lines))
    assert script.receive({"id": 0, "method": "initialize"}) == [
        {"id": 0, "result": {"protocolVersion": 1}}
    ]
    sent = script.receive({"id": 1, "method": "session/prompt"})
    assert isinstance(sent, list) and [m.get("method") for m in sent] == [
        "session/update",
        "session/request_permission",
    ]
    assert script.receive({"id": "a1", "result": {}}) == [
        {"id": 1, "result": {"stopReason": "end_turn"}}
    ]
    assert script.finished
    wrong = ReplayScript(load_exchanges(lines)).receive({"id": 0, "method": "session/new"})
    assert isinstance(wrong, Divergence)
    assert wrong.message == (
        "replay diverged after 0 of 3 recorded messages: expected initialize (request), "
        "got session/new (request)"
    )


def test_a_recording_without_agent_traffic_is_refused() -> None:
    with pytest.raises(ValueError, match="no agent traffic"):
        load_exchanges([_entry("editor->bridge", {"id": 1, "method": "initialize"})])
