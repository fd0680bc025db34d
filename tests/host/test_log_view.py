"""What a host's client is shown for each event-log entry (pure)."""

from __future__ import annotations

from acp_bridge.host.log_view import SENDER_KIND, SenderLabels, acp_update, watch_event


def test_an_update_is_shown_unchanged_under_the_conversation_id() -> None:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    data = {"seq": 1, "sessionId": "sess_agent", "update": update}
    assert acp_update("conv", "update", data, None) == {"sessionId": "conv", "update": update}


def test_a_prompt_is_a_user_message_chunk_with_its_sender() -> None:
    shown = acp_update("conv", "turn_started", {"seq": 3, "text": "fix it"}, "bob (2)")
    assert shown is not None
    update = shown["update"]
    assert update["sessionUpdate"] == "user_message_chunk"
    assert update["content"] == {"type": "text", "text": "fix it"}
    assert update["_meta"] == {"acpBridge": {"seq": 3, "sender": "bob (2)"}}


def test_other_entries_are_not_shown_to_acp_clients() -> None:
    for kind in ("turn_ended", "turn_failed", "agent_started", SENDER_KIND, "permission"):
        assert acp_update("conv", kind, {"seq": 1}, None) is None
    assert acp_update("conv", "update", "not a dict", None) is None


def test_labels_come_from_the_log_and_are_taken_once() -> None:
    labels = SenderLabels()
    labels.see(SENDER_KIND, {"seq": 4, "label": "cli"})
    labels.note(5, 7, "alice (7)")
    assert labels.take(4) == (None, "cli")
    assert labels.take(4) == (None, None)
    assert labels.take(5) == (7, "alice (7)")


def test_a_watcher_sees_the_json_event_with_its_cursor() -> None:
    shown = watch_event("conv", 42, "turn_ended", 1.5, {"seq": 1, "stopReason": "end_turn"})
    assert shown == {
        "conversationId": "conv",
        "cursor": 42,
        "event": {"event": "turn_ended", "ts": 1.5, "seq": 1, "stopReason": "end_turn"},
    }
