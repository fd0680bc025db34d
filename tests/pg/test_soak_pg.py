"""The shared-store soak, short (issue 23; the long one is ``python -m scripts.soak.pg_hosts``):
three ``serve`` hosts on one database, 5 conversations, 150 messages committed to random
conversations while two hosts are killed with ``kill -9`` and started again. Every message ends
in one final state, none is prompted twice, FIFO holds per conversation, no lease is left."""

from __future__ import annotations

from scripts.soak.pg_hosts import soak


def test_three_hosts_killed_at_random_lose_no_message_and_prompt_none_twice(
    pg_url: str,
) -> None:
    report = soak(pg_url, hosts=3, conversations=5, messages=150, kills=2, seed=23)
    assert report["ok"], report
    assert report["messages"] == 150
    assert report["leases_held"] == 0
