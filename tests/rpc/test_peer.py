"""Two JsonRpcPeers linked in memory, and one peer against raw bytes: every rule of the peer."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pydantic
import pytest

from acp_bridge.errors import (
    ConnectionClosedError,
    ErrorCode,
    LocalProtocolError,
    ResourceClosedError,
    RpcError,
)
from acp_bridge.rpc.peer import JsonRpcPeer
from tests.helpers import RawEnd, memory_byte_pipe, open_peer_pair, open_raw_peer

pytestmark = pytest.mark.anyio


async def _echo(params: Any) -> Any:
    return {"echo": params}


async def _read_json(raw: RawEnd) -> Any:
    with anyio.fail_after(5):
        return json.loads(await raw.receive_line())


async def _ping(raw: RawEnd, marker: str) -> None:
    """Prove that nothing was sent for what came before: the next line answers this ping."""
    await raw.send(b'{"jsonrpc":"2.0","id":"%s","method":"ping"}\n' % marker.encode())
    reply = await _read_json(raw)
    assert reply["id"] == marker


# -- requests, responses, notifications --------------------------------------------------------


async def test_a_request_gets_the_handlers_result() -> None:
    async with open_peer_pair() as (a, b):
        b.on_request("echo", _echo)
        assert await a.request("echo", {"x": 1, "_meta": {"k": "v"}}) == {
            "echo": {"x": 1, "_meta": {"k": "v"}}
        }
        assert await a.request("echo", [1, 2]) == {"echo": [1, 2]}
        assert await a.request("echo") == {"echo": None}


async def test_both_sides_send_and_serve_on_one_connection() -> None:
    async with open_peer_pair() as (a, b):
        a.on_request("echo", _echo)
        b.on_request("echo", _echo)
        assert await a.request("echo", {"from": "a"}) == {"echo": {"from": "a"}}
        assert await b.request("echo", {"from": "b"}) == {"echo": {"from": "b"}}


async def test_a_handler_can_call_the_other_side_while_it_serves() -> None:
    """The agent asks permission while the client's prompt is still open."""
    async with open_peer_pair() as (client, agent):

        async def prompt(params: Any) -> Any:
            decision = await agent.request("session/request_permission", {"tool": "rm"})
            return {"stopReason": "end_turn", "decision": decision}

        async def permission(params: Any) -> Any:
            return {"outcome": {"outcome": "selected", "optionId": "yes"}}

        agent.on_request("session/prompt", prompt)
        client.on_request("session/request_permission", permission)
        result = await client.request("session/prompt", {"sessionId": "s"})
        assert result["decision"]["outcome"]["optionId"] == "yes"


async def test_many_concurrent_requests_each_get_their_own_answer() -> None:
    async with open_peer_pair() as (a, b):
        gate = anyio.Event()

        async def slow_echo(params: Any) -> Any:
            await gate.wait()
            return params

        b.on_request("echo", slow_echo)
        results: dict[int, Any] = {}

        async def call(n: int) -> None:
            results[n] = await a.request("echo", {"n": n})

        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(call, n)
            gate.set()
        assert results == {n: {"n": n} for n in range(50)}


async def test_notifications_reach_their_handler_in_order() -> None:
    async with open_peer_pair() as (a, b):
        seen: list[int] = []
        done = anyio.Event()

        def on_update(params: Any) -> None:
            seen.append(params["n"])
            if params["n"] == 999:
                done.set()

        b.on_notification("session/update", on_update)
        for n in range(1000):
            await a.notify("session/update", {"n": n})
        with anyio.fail_after(5):
            await done.wait()
        assert seen == list(range(1000))


async def test_async_notification_handlers_are_awaited_in_order() -> None:
    async with open_peer_pair() as (a, b):
        seen: list[int] = []
        done = anyio.Event()

        async def on_update(params: Any) -> None:
            await anyio.lowlevel.checkpoint()
            seen.append(params["n"])
            if params["n"] == 99:
                done.set()

        b.on_notification("session/update", on_update)
        for n in range(100):
            await a.notify("session/update", {"n": n})
        with anyio.fail_after(5):
            await done.wait()
        assert seen == list(range(100))


async def test_a_failing_notification_handler_does_not_stop_the_peer() -> None:
    async with open_peer_pair() as (a, b):

        def explode(params: Any) -> None:
            raise ValueError("handler bug")

        b.on_notification("boom", explode)
        b.on_request("echo", _echo)
        await a.notify("boom", {})
        assert await a.request("echo", [1]) == {"echo": [1]}


# -- errors answered by the serving side --------------------------------------------------------


async def test_an_rpc_error_raised_by_a_handler_reaches_the_caller_intact() -> None:
    async with open_peer_pair() as (a, b):

        async def missing(params: Any) -> Any:
            raise RpcError.resource_not_found("file:///nope")

        b.on_request("fs/read_text_file", missing)
        with pytest.raises(RpcError) as info:
            await a.request("fs/read_text_file", {"path": "/nope"})
        assert info.value.code == ErrorCode.RESOURCE_NOT_FOUND
        assert info.value.data == {"uri": "file:///nope"}


@pytest.mark.parametrize("method", ["session/unknown", "_zed.dev/workspace/buffers"])
async def test_an_unknown_method_is_answered_method_not_found(method: str) -> None:
    async with open_peer_pair() as (a, _b):
        with pytest.raises(RpcError) as info:
            await a.request(method, {})
        assert info.value.code == ErrorCode.METHOD_NOT_FOUND


async def test_params_that_fail_validation_are_answered_invalid_params() -> None:
    class Params(pydantic.BaseModel):
        sessionId: str

    async with open_peer_pair() as (a, b):

        async def handler(params: Any) -> Any:
            return Params.model_validate(params).sessionId

        b.on_request("session/prompt", handler)
        with pytest.raises(RpcError) as info:
            await a.request("session/prompt", {"sessionId": 5})
        assert info.value.code == ErrorCode.INVALID_PARAMS
        assert info.value.data[0]["loc"] == ["sessionId"]


async def test_a_crashing_handler_answers_internal_error_without_leaking_its_text() -> None:
    async with open_peer_pair() as (a, b):

        async def crash(params: Any) -> Any:
            raise KeyError("/home/user/.secret-token")

        b.on_request("crash", crash)
        with pytest.raises(RpcError) as info:
            await a.request("crash", {})
        assert info.value.code == ErrorCode.INTERNAL_ERROR
        assert "secret" not in json.dumps(info.value.to_wire())


async def test_a_result_that_is_not_json_is_answered_internal_error() -> None:
    async with open_peer_pair() as (a, b):

        async def unserializable(params: Any) -> Any:
            return {"value": {1, 2}}

        b.on_request("bad", unserializable)
        with pytest.raises(RpcError) as info:
            await a.request("bad", {})
        assert info.value.code == ErrorCode.INTERNAL_ERROR


@pytest.mark.parametrize("params", [{"nan": float("nan")}, {"set": {1}}, "text", 5])
async def test_params_we_cannot_send_fail_locally_and_leave_no_pending_entry(params: Any) -> None:
    async with open_peer_pair() as (a, _b):
        with pytest.raises(LocalProtocolError):
            await a.request("echo", params)
        with pytest.raises(LocalProtocolError):
            await a.notify("echo", params)
        assert len(a._pending) == 0


# -- cancellation --------------------------------------------------------------------------------


async def test_a_cancelled_caller_sends_cancel_request_and_the_handler_answers_cancelled() -> None:
    async with open_peer_pair() as (a, b):
        started = anyio.Event()
        handler_cancelled = anyio.Event()
        frames: list[tuple[str, bytes]] = []
        b.add_observer(lambda direction, line: frames.append((direction, line)))

        async def forever(params: Any) -> Any:
            started.set()
            try:
                await anyio.sleep_forever()
            finally:
                handler_cancelled.set()

        b.on_request("slow", forever)
        async with anyio.create_task_group() as tg:

            async def caller() -> None:
                await a.request("slow", {})

            tg.start_soon(caller)
            with anyio.fail_after(5):
                await started.wait()
            tg.cancel_scope.cancel()
        with anyio.fail_after(5):
            await handler_cancelled.wait()
            while not any(d == "out" and b'"code":-32800' in line for d, line in frames):
                await anyio.lowlevel.checkpoint()
        assert any(d == "in" and b"$/cancel_request" in line for d, line in frames)
        assert len(a._pending) == 0


async def test_cancel_request_from_the_wire_cancels_exactly_that_handler() -> None:
    async with open_raw_peer() as (peer, raw):
        started = anyio.Event()

        async def forever(params: Any) -> Any:
            started.set()
            await anyio.sleep_forever()

        peer.on_request("slow", forever)
        peer.on_request("ping", _echo)
        await raw.send(b'{"jsonrpc":"2.0","id":7,"method":"slow"}\n')
        with anyio.fail_after(5):
            await started.wait()
        await raw.send(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}}\n')
        reply = await _read_json(raw)
        assert reply == {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {"code": -32800, "message": "Request cancelled"},
        }
        await _ping(raw, "after")


async def test_cancel_request_for_an_unknown_id_is_ignored() -> None:
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        await raw.send(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":99}}\n')
        await raw.send(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":"junk"}\n')
        await _ping(raw, "still-alive")


# -- the connection ends --------------------------------------------------------------------------


async def test_eof_fails_every_pending_request_at_once_and_later_ones_immediately() -> None:
    to_peer, peer_in = memory_byte_pipe()
    peer_out, _from_peer = memory_byte_pipe()
    peer = JsonRpcPeer(peer_in, peer_out, name="agent")
    failures: list[BaseException] = []
    sent = 0

    def count_sent(direction: str, line: bytes) -> None:
        nonlocal sent
        sent += direction == "out"

    peer.add_observer(count_sent)
    async with anyio.create_task_group() as tg:
        await tg.start(peer.run)

        async def call(n: int) -> None:
            try:
                await peer.request("session/prompt", {"n": n})
            except ConnectionClosedError as exc:
                failures.append(exc)

        for n in range(3):
            tg.start_soon(call, n)
        with anyio.fail_after(5):
            while sent < 3:
                await anyio.lowlevel.checkpoint()
        await to_peer.aclose()  # EOF
        with anyio.fail_after(5):
            await peer.wait_closed()
    for stream in (peer_in, peer_out, _from_peer):
        await stream.aclose()
    assert len(failures) == 3
    assert "agent closed the connection" in str(failures[0])
    assert isinstance(peer.closed_reason, ConnectionClosedError)
    with pytest.raises(ConnectionClosedError):
        await peer.request("session/prompt", {})
    with pytest.raises(ConnectionClosedError):
        await peer.notify("session/cancel", {})


async def test_aclose_fails_pending_requests_as_closed_by_us() -> None:
    async with open_peer_pair() as (a, b):
        started = anyio.Event()

        async def forever(params: Any) -> Any:
            started.set()
            await anyio.sleep_forever()

        b.on_request("slow", forever)
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await a.request("slow")
            except ResourceClosedError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(5):
                await started.wait()
            await a.aclose()
        assert len(outcome) == 1
        with pytest.raises(ResourceClosedError):
            await a.request("slow")


async def test_a_line_over_the_cap_breaks_the_connection_and_fails_pending() -> None:
    async with open_raw_peer(max_line_bytes=1024) as (peer, raw):
        failures: list[BaseException] = []

        async def call() -> None:
            try:
                await peer.request("session/prompt", {})
            except ConnectionClosedError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await _read_json(raw)  # the request went out
            await raw.send(b'{"jsonrpc":"2.0","method":"x","params":"' + b"a" * 2000)
            with anyio.fail_after(5):
                await peer.wait_closed()
        assert len(failures) == 1
        assert "cap" in str(peer.closed_reason)


async def test_a_peer_that_stops_reading_fails_our_requests() -> None:
    in_send, peer_in = memory_byte_pipe()
    peer_out, from_peer = memory_byte_pipe()
    peer = JsonRpcPeer(peer_in, peer_out, name="agent")
    await from_peer.aclose()  # nobody reads what we write: the pipe is broken
    async with anyio.create_task_group() as tg:
        await tg.start(peer.run)
        with pytest.raises(ConnectionClosedError), anyio.fail_after(5):
            await peer.request("initialize", {})
        for stream in (in_send, peer_in, peer_out):
            await stream.aclose()


# -- bad input from the other side -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"this is not json", ErrorCode.PARSE_ERROR),
        (b'{"jsonrpc":"2.0","id":1,"method":"x"', ErrorCode.PARSE_ERROR),
        (b'\xff\xfe{"jsonrpc":"2.0"}', ErrorCode.PARSE_ERROR),
        (b"42", ErrorCode.INVALID_REQUEST),
        (b'"a string"', ErrorCode.INVALID_REQUEST),
        (b"null", ErrorCode.INVALID_REQUEST),
        (b"[]", ErrorCode.INVALID_REQUEST),
    ],
)
async def test_unreadable_input_is_answered_with_id_null(line: bytes, code: int) -> None:
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        await raw.send(line + b"\n")
        reply = await _read_json(raw)
        assert reply["id"] is None
        assert reply["error"]["code"] == code
        await _ping(raw, "next")


@pytest.mark.parametrize(
    "line",
    [
        b"[" * 2000 + b"]" * 2000,
        b'{"jsonrpc":"2.0","method":"session/update","params":' + b"[" * 3000,
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[' + b"9" * 4301 + b"]}",
        b'{"jsonrpc":"2.0","id":77,"result":' + b"1" * 5000 + b"}",
    ],
    ids=["deep-brackets", "deep-params", "long-int-request", "long-int-response"],
)
async def test_a_line_that_breaks_the_decoder_is_answered_and_skipped(line: bytes) -> None:
    """Issue 7 (8): RecursionError / ValueError used to escape the reader and end the peer
    (an exception group, exit 1). Now it is a parse error like any other garbage."""
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        await raw.send(line + b"\n")
        reply = await _read_json(raw)
        assert reply["id"] is None
        assert reply["error"]["code"] == ErrorCode.PARSE_ERROR
        await _ping(raw, "still-serving")
        assert not peer.is_closed


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "1.0", "id": 5, "method": "ping"},
        {"id": 5, "method": "ping"},
        {"jsonrpc": "2.0", "id": 5, "method": 12},
        {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": "text"},
        {"jsonrpc": "2.0", "id": 5, "method": "ping", "result": 1},
        {"jsonrpc": "2.0", "id": 5},
    ],
)
async def test_an_invalid_request_is_answered_invalid_request_with_its_id(
    message: dict[str, Any],
) -> None:
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        await raw.send(json.dumps(message).encode() + b"\n")
        reply = await _read_json(raw)
        assert reply["id"] == 5
        assert reply["error"]["code"] == ErrorCode.INVALID_REQUEST


async def test_an_id_of_the_wrong_type_is_answered_with_id_null() -> None:
    async with open_raw_peer() as (_peer, raw):
        await raw.send(b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}\n')
        reply = await _read_json(raw)
        assert reply["id"] is None
        assert reply["error"]["code"] == ErrorCode.INVALID_REQUEST


async def test_a_request_with_a_null_id_is_answered_with_a_null_id() -> None:
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        await raw.send(b'{"jsonrpc":"2.0","id":null,"method":"ping","params":{"a":1}}\n')
        assert await _read_json(raw) == {"jsonrpc": "2.0", "id": None, "result": {"echo": {"a": 1}}}


async def test_broken_notifications_and_responses_get_no_reply() -> None:
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        for line in [
            b'{"jsonrpc":"2.0","method":"session/update","params":"text"}',
            b'{"jsonrpc":"2.0","method":"unknown/notification","params":{}}',
            b'{"jsonrpc":"2.0","method":"_ext/notification"}',
            b'{"jsonrpc":"2.0","id":12345,"result":{}}',
            b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}',
            b'{"jsonrpc":"2.0","result":{}}',
            b"",
            b"   ",
        ]:
            await raw.send(line + b"\n")
        await _ping(raw, "nothing-before-me")


async def test_a_batch_is_unpacked_and_each_request_answered() -> None:
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        seen: list[Any] = []
        peer.on_notification("note", seen.append)
        await raw.send(
            b'[{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]},'
            b'{"jsonrpc":"2.0","method":"note","params":{"n":1}},'
            b'{"jsonrpc":"2.0","id":2,"method":"ping","params":[2]}, 17]\n'
        )
        replies = [await _read_json(raw) for _ in range(3)]
        by_id = {reply["id"]: reply for reply in replies}
        assert by_id[1]["result"] == {"echo": [1]}
        assert by_id[2]["result"] == {"echo": [2]}
        assert by_id[None]["error"]["code"] == ErrorCode.INVALID_REQUEST
        assert seen == [{"n": 1}]


async def test_a_response_for_an_unknown_or_answered_id_is_dropped() -> None:
    async with open_raw_peer() as (peer, raw):
        peer.on_request("ping", _echo)
        async with anyio.create_task_group() as tg:
            results: list[Any] = []

            async def call() -> None:
                results.append(await peer.request("initialize", {}))

            tg.start_soon(call)
            sent = await _read_json(raw)
            answer = b'{"jsonrpc":"2.0","id":%d,"result":"first"}\n' % sent["id"]
            await raw.send(answer)
            await raw.send(answer.replace(b"first", b"second"))  # a duplicate
            await raw.send(b'{"jsonrpc":"2.0","id":"never-sent","result":1}\n')
        assert results == ["first"]
        await _ping(raw, "alive")


async def test_an_error_response_with_a_malformed_error_object_still_fails_the_call() -> None:
    async with open_raw_peer() as (peer, raw):
        async with anyio.create_task_group() as tg:
            errors: list[RpcError] = []

            async def call() -> None:
                try:
                    await peer.request("initialize", {})
                except RpcError as exc:
                    errors.append(exc)

            tg.start_soon(call)
            sent = await _read_json(raw)
            await raw.send(b'{"jsonrpc":"2.0","id":%d,"error":"oops"}\n' % sent["id"])
        assert errors[0].code == ErrorCode.INTERNAL_ERROR


async def test_a_duplicate_id_while_the_first_is_in_flight_is_refused() -> None:
    async with open_raw_peer() as (peer, raw):
        release = anyio.Event()

        async def wait(params: Any) -> Any:
            await release.wait()
            return "done"

        peer.on_request("wait", wait)
        await raw.send(b'{"jsonrpc":"2.0","id":3,"method":"wait"}\n')
        await raw.send(b'{"jsonrpc":"2.0","id":3,"method":"wait"}\n')
        refusal = await _read_json(raw)
        assert refusal["id"] == 3
        assert refusal["error"]["code"] == ErrorCode.INVALID_REQUEST
        release.set()
        assert (await _read_json(raw))["result"] == "done"


# -- ids and observers -------------------------------------------------------------------------


async def test_outgoing_ids_count_up_in_our_own_space() -> None:
    async with open_raw_peer(id_prefix="bridge-") as (peer, raw):
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(peer.notify, "x", {})
                tg.start_soon(peer.request, "y", {})
            ids = set()
            for _ in range(4):
                msg = await _read_json(raw)
                if "id" in msg:
                    ids.add(msg["id"])
                    reply = b'{"jsonrpc":"2.0","id":"%s","result":null}\n' % msg["id"].encode()
                    await raw.send(reply)
        assert ids == {"bridge-1", "bridge-2"}


async def test_observers_see_every_raw_frame_in_both_directions() -> None:
    async with open_raw_peer() as (peer, raw):
        frames: list[tuple[str, bytes]] = []
        peer.add_observer(lambda direction, line: frames.append((direction, line)))
        peer.on_request("ping", _echo)
        await raw.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\nnot json\n')
        await _read_json(raw)
        await _read_json(raw)
        assert frames[0] == ("in", b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
        assert ("in", b"not json") in frames
        outgoing = [line for direction, line in frames if direction == "out"]
        assert len(outgoing) == 2
        assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in outgoing)


async def test_what_we_send_is_compact_utf8_with_no_embedded_newline() -> None:
    async with open_raw_peer() as (peer, raw):
        await peer.notify("session/update", {"text": "line one\nline two\u2028 – ünïcode"})
        line = await raw.receive_line()
        assert b" " not in line.split(b'"text"')[0]
        assert "ünïcode".encode() in line
        assert json.loads(line)["params"]["text"] == "line one\nline two\u2028 – ünïcode"


async def test_run_may_only_be_called_once() -> None:
    async with open_peer_pair() as (a, _b):
        with pytest.raises(RuntimeError):
            await a.run()


async def test_on_answer_runs_before_anything_the_peer_sends_after_its_answer() -> None:
    """The fence for late updates: the turn is closed before the next line is handled."""
    async with open_raw_peer() as (peer, raw):
        order: list[str] = []
        peer.on_notification("session/update", lambda params: order.append("update"))
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await peer.request("session/prompt", {}, on_answer=lambda: order.append("answer"))

            tg.start_soon(call)
            sent = await _read_json(raw)
            await raw.send(
                b'{"jsonrpc":"2.0","id":%d,"result":{"stopReason":"end_turn"}}\n'
                b'{"jsonrpc":"2.0","method":"session/update","params":{}}\n' % sent["id"]
            )
        assert order == ["answer", "update"]
