"""The host's core on both backends: real agents, real Unix sockets, real clients (issue 22)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.errors import RpcError
from tests.host.harness import agent_argv, connect, running_host

pytestmark = pytest.mark.anyio


def _prompt(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


async def test_two_clients_prompt_fifo_and_both_see_every_update(tmp_path: Path) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="alice") as alice, connect(socket, name="bob") as bob:
            new = await alice.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = new["sessionId"]
            await bob.request(
                "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            )
            answers: dict[str, Any] = {}

            async def prompt(who: Any, name: str, text: str) -> None:
                answers[name] = await who.request(
                    "session/prompt", {"sessionId": sid, "prompt": _prompt(text)}
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt, alice, "alice", "echo one two three; wait 0.3")
                await alice.wait_for(lambda c: bool(c.texts()))  # alice's turn runs
                tg.start_soon(prompt, bob, "bob", "echo four five")
            assert answers == {
                "alice": {"stopReason": "end_turn"},
                "bob": {"stopReason": "end_turn"},
            }
            # Every update reached both, in the queue's order (alice's turn, then bob's). Bob's
            # answer follows what bob was shown; alice's copy of bob's turn may still be on
            # its way (each client is written on its own), so alice's is waited for.
            expected = ["one ", "two ", "three", "four ", "five"]
            await alice.wait_for(lambda c: len("".join(c.texts())) >= len("".join(expected)))
            assert "".join(alice.texts()) == "".join(expected)
            assert "".join(bob.texts()) == "".join(expected)
            assert all(u["sessionId"] == sid for u in alice.updates + bob.updates)
            # Each saw the other's prompt, labelled with its sender; not its own.
            alice_saw = [
                u["update"]
                for u in alice.updates
                if u["update"]["sessionUpdate"] == "user_message_chunk"
            ]
            bob_saw = [
                u["update"]
                for u in bob.updates
                if u["update"]["sessionUpdate"] == "user_message_chunk"
            ]
            assert [u["content"]["text"] for u in alice_saw] == ["echo four five"]
            assert alice_saw[0]["_meta"]["acpBridge"]["sender"].startswith("bob")
            assert [u["content"]["text"] for u in bob_saw] == ["echo one two three; wait 0.3"]
            assert bob_saw[0]["_meta"]["acpBridge"]["sender"].startswith("alice")


async def test_first_permission_answer_wins(tmp_path: Path) -> None:
    asked: list[str] = []
    cancelled = anyio.Event()
    clients: dict[str, Any] = {}

    async def quick(params: Any) -> Any:
        asked.append("quick")
        call = params["toolCall"]["toolCallId"]
        seen = [u["update"].get("toolCallId") for u in clients["fast"].updates]
        assert call in seen  # the tool call's update came before the question about it
        allow = next(o for o in params["options"] if o["kind"] == "allow_once")
        return {"outcome": {"outcome": "selected", "optionId": allow["optionId"]}}

    async def never(params: Any) -> Any:
        asked.append("never")
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async with running_host(tmp_path, agent_argv("permission_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with (
            connect(socket, name="slow", on_permission=never) as slow,
            connect(socket, name="fast", on_permission=quick) as fast,
        ):
            clients["fast"] = fast
            sid = (await slow.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            await fast.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
            answer = await fast.request(
                "session/prompt", {"sessionId": sid, "prompt": _prompt("permission")}
            )
            assert answer == {"stopReason": "end_turn"}
            assert sorted(asked) == ["never", "quick"]
            with anyio.fail_after(10):
                await cancelled.wait()  # the loser's request was cancelled
            await slow.wait_for(lambda c: any("allow_once" in t for t in c.texts()))
            assert any(
                t.startswith("permission selected") and "allow_once" in t for t in fast.texts()
            )


async def test_no_client_falls_back_to_the_hosts_policy(tmp_path: Path) -> None:
    async with running_host(tmp_path, agent_argv("permission_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="watcher", initialize=False) as verb:
            record = host.store.create_conversation(agent={}, cwd=str(tmp_path), now=1.0)
            sent = await verb.request(
                "_acp_bridge/send",
                {"conversationId": record.id, "content": _prompt("permission"), "label": "cli"},
            )
            assert sent["seq"] == 1
            await verb.request("_acp_bridge/watch", {"conversationId": record.id})
            await verb.wait_for(
                lambda c: any(e["event"]["event"] == "turn_ended" for e in c.events)
            )
            texts = [
                e["event"]["update"]["content"].get("text", "")
                for e in verb.events
                if e["event"]["event"] == "update"
                and e["event"]["update"]["sessionUpdate"] == "agent_message_chunk"
            ]
            assert any("reject" in t for t in texts)  # the host's default policy: deny
            cursors = [e["cursor"] for e in verb.events]
            assert cursors == sorted(set(cursors))  # never twice, in order


async def test_a_client_gone_mid_turn_leaves_the_turn_running_and_load_replays_it(
    tmp_path: Path,
) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="editor") as editor:
            sid = (await editor.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(
                        editor.request,
                        "session/prompt",
                        {"sessionId": sid, "prompt": _prompt("trickle 20 20")},
                    )
                    await editor.wait_for(lambda c: len(c.texts()) >= 2)
                    scope.cancel()
        # the editor is gone; the turn goes on and ends done
        conversation = host.find(sid)
        with anyio.fail_after(30):
            while True:
                messages = host.store.messages(sid)
                if messages and messages[0].is_final:
                    break
                await anyio.sleep(0.05)  # polling the store: the test's only view of it
        assert messages[0].state == "done"
        async with connect(socket, name="again") as again:
            await again.request(
                "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
            )
            texts = again.texts()
            assert texts == [f"trickle-1-{i} " for i in range(20)]
            assert [
                u["update"]["content"]["text"]
                for u in again.updates
                if u["update"]["sessionUpdate"] == "user_message_chunk"
            ] == ["trickle 20 20"]
        assert conversation.hub.id == sid


async def test_unknown_session_is_refused(tmp_path: Path) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket) as client:
            with pytest.raises(RpcError) as caught:
                await client.request("session/load", {"sessionId": "nope", "cwd": "/"})
            assert caught.value.code == -32002


async def test_a_client_loading_mid_turn_gets_every_update_once_in_order(tmp_path: Path) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="first") as first, connect(socket, name="late") as late:
            sid = (await first.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            answers: list[Any] = []

            async def prompt() -> None:
                answers.append(
                    await first.request(
                        "session/prompt", {"sessionId": sid, "prompt": _prompt("trickle 300 2")}
                    )
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt)
                await first.wait_for(lambda c: len(c.texts()) >= 50)  # mid-turn
                await late.request(
                    "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
                )
            assert answers == [{"stopReason": "end_turn"}]
            expected = [f"trickle-1-{i} " for i in range(300)]
            assert first.texts() == expected
            await late.wait_for(lambda c: len(c.texts()) >= 300)
            assert late.texts() == expected  # the replay, then live: never twice, no gap


async def test_other_session_methods_pass_to_the_agent(tmp_path: Path) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket) as client:
            sid = (await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            # session/delete is not the host's: the agent answers it ({} for a known session)
            assert await client.request("session/delete", {"sessionId": sid}) == {}
            with pytest.raises(RpcError) as caught:  # nor the agent's: its -32601 comes back
                await client.request("_vendor/thing", {"sessionId": sid})
            assert caught.value.code == -32601
            with pytest.raises(RpcError) as caught:  # not an ACP name at all: ours, -32601
                await client.request("frobnicate", {})
            assert caught.value.code == -32601


async def test_a_cancel_from_another_client_ends_the_turn_and_the_queue_goes_on(
    tmp_path: Path,
) -> None:
    async with running_host(tmp_path, agent_argv("echo_agent.py")) as host:
        socket = host.socket_path
        assert socket is not None
        async with connect(socket, name="a") as a, connect(socket, name="b") as b:
            sid = (await a.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                "sessionId"
            ]
            await b.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
            answers: dict[str, Any] = {}

            async def prompt(who: Any, name: str, text: str) -> None:
                answers[name] = await who.request(
                    "session/prompt", {"sessionId": sid, "prompt": _prompt(text)}
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(prompt, a, "a", "echo waiting; wait 60")
                await b.wait_for(lambda c: "waiting" in "".join(c.texts()))
                tg.start_soon(prompt, b, "b", "echo next")
                hub = host.find(sid).hub
                with anyio.fail_after(30):
                    while len(host.store.messages(sid)) < 2:
                        await hub.changed.wait()  # b's message is committed and queued
                await b.peer.notify("session/cancel", {"sessionId": sid})
            assert answers == {"a": {"stopReason": "cancelled"}, "b": {"stopReason": "end_turn"}}
