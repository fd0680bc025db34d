"""The shared-store soak, short (issue 23; the long one is ``python -m scripts.soak.pg_hosts``):
three ``serve`` hosts on one database, 5 conversations, 60 messages sent with
``_acp_bridge/send`` through random hosts (a host that does not own the conversation answers
``ownedElsewhere`` and the message is committed to the store, as ``acp-bridge send`` does) while
two hosts are killed with ``kill -9`` and started again. A send cut by a kill is looked up in
the store by its token and sent again only if it was not committed. Every message ends in one
final state, is stored once, is prompted at most once, FIFO holds per conversation, no lease
is left."""

from __future__ import annotations

from scripts.soak.pg_hosts import soak


def test_sends_through_random_hosts_killed_at_random_lose_no_message_and_repeat_none(
    pg_url: str,
) -> None:
    report = soak(pg_url, hosts=3, conversations=5, messages=60, kills=2, seed=23)
    assert report["ok"], report
    assert report["messages"] == 60
    assert report["leases_held"] == 0
    sends = report["sends"]
    # Each message counted once: answered by a host, committed for a non-owner host, or cut
    # by a kill and found committed (never sent again then).
    answered = sends["through_owner"] + sends["to_non_owner_then_store"]
    assert answered + sends["cut_found_committed"] == 60
    assert sends["cut_by_kill"] == sends["cut_found_committed"] + sends["cut_sent_again"]
    assert report["kills"]["total"] == 2
