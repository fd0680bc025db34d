"""Hostile clients of the real ``acp-bridge serve`` (the brief: "so may the editor: id reuse,
malformed frames, answers that come late or twice"). Each client is a plain socket speaking
lines (tests/host/cli_client.py), so nothing of acp_bridge shapes what it sends; the host must
answer each fault on its own connection and serve every other client as before."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.host.cli_client import LineClient, agent, finish, start_serve


@contextmanager
def host(tmp_path: Path, script: str) -> Iterator[Path]:
    socket_path = tmp_path / "s" / "host.sock"
    process = start_serve(
        "--store", str(tmp_path / "q.db"), "--socket", str(socket_path), "--", *agent(script)
    )
    stderr = ""
    try:
        yield socket_path
    finally:
        stderr = finish(process, signal.SIGTERM)
    assert "Traceback" not in stderr, stderr


def client(socket_path: Path, name: str) -> LineClient:
    c = LineClient(socket_path)
    info = {"name": name, "version": "1"}
    init = c.request("initialize", {"protocolVersion": 1, "clientInfo": info})
    assert "result" in init, init
    return c


def prompt(session_id: str, text: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}


def answer_of(c: LineClient, ident: Any) -> dict[str, Any]:
    return c.read_until(lambda m: m.get("id") == ident and "method" not in m)


def texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        update = (
            m.get("params", {}).get("update", {}) if m.get("method") == "session/update" else {}
        )
        if update.get("sessionUpdate") == "agent_message_chunk":
            out.append(update["content"].get("text", ""))
    return out


def test_malformed_frames_and_a_reused_id_get_their_errors_and_the_connection_goes_on(
    tmp_path: Path,
) -> None:
    with host(tmp_path, "echo_agent.py") as socket_path:
        bad = client(socket_path, "bad")
        other = client(socket_path, "other")
        sid = bad.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
            "sessionId"
        ]
        loaded = other.request("session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []})
        assert "result" in loaded, loaded
        first = {"jsonrpc": "2.0", "id": 50, "method": "session/prompt"}
        bad.send({**first, "params": prompt(sid, "wait")})
        other.read_until(lambda m: m.get("method") == "session/update")  # the prompt, shown
        bad.send({**first, "params": prompt(sid, "echo second")})
        refused = answer_of(bad, 50)
        assert refused["error"]["code"] == -32600 and "duplicate" in refused["error"]["data"]
        frames = [
            (b'{"jsonrpc":"2.0","id":7,"method":5}', 7, -32600),
            (b"this is not json", None, -32700),
            (b"[1, 2]", None, -32600),
            (b'{"id":"m-2"}', "m-2", -32600),
            (b'{"jsonrpc":"2.0","id":{"a":1},"method":"session/list"}', None, -32600),
        ]
        for raw, ident, code in frames:
            bad.sock.sendall(raw + b"\n")
            error = bad.read_until(lambda m, i=ident: "error" in m and m.get("id") == i)
            assert error["error"]["code"] == code, (raw, error)
        bad.sock.sendall(b'{"jsonrpc":"2.0","id":99,"result":{}}\n')  # answers nothing: dropped
        # The reused id's first request was never touched: the cancel ends it, under id 50.
        other.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        assert answer_of(bad, 50)["result"]["stopReason"] == "cancelled"
        listed = bad.request("session/list", {})["result"]["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]
        again = other.request("session/prompt", prompt(sid, "echo fine"))
        assert again["result"] == {"stopReason": "end_turn"}
        answers_to_50 = [m for m in bad.notifications if m.get("id") == 50 and "method" not in m]
        assert len(answers_to_50) == 2  # the refusal and the turn's own answer: nothing else
        bad.close()
        other.close()


def test_a_permission_answered_twice_and_one_answered_late_are_taken_once(tmp_path: Path) -> None:
    """Client A answers the agent's question twice, client B after A (late): the agent gets
    one answer, B is told the question was withdrawn, and both connections go on."""
    with host(tmp_path, "permission_agent.py") as socket_path:
        a = client(socket_path, "a")
        b = client(socket_path, "b")
        sid = a.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
            "sessionId"
        ]
        assert "result" in b.request(
            "session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []}
        )
        a.send(
            {
                "jsonrpc": "2.0",
                "id": 100,
                "method": "session/prompt",
                "params": prompt(sid, "permission"),
            }
        )
        asked_a = a.read_until(lambda m: m.get("method") == "session/request_permission")
        asked_b = b.read_until(lambda m: m.get("method") == "session/request_permission")
        options = asked_a["params"]["options"]
        allow = next(o["optionId"] for o in options if o["kind"] == "allow_once")
        reject = next(o["optionId"] for o in options if o["kind"] == "reject_once")
        chosen = {"outcome": {"outcome": "selected", "optionId": allow}}
        for _ in range(2):
            a.send({"jsonrpc": "2.0", "id": asked_a["id"], "result": chosen})
        withdrawn = b.read_until(lambda m: m.get("method") == "$/cancel_request")
        assert withdrawn["params"]["requestId"] == asked_b["id"]
        late = {"outcome": {"outcome": "selected", "optionId": reject}}
        b.send({"jsonrpc": "2.0", "id": asked_b["id"], "result": late})
        assert answer_of(a, 100)["result"]["stopReason"] == "end_turn"
        said = [t for t in texts(a.notifications) if t.startswith("permission")]
        assert said == [f"permission selected {allow} allow_once"], said
        # Both go on: B's next question is answered by B alone now (A does not answer).
        b.send(
            {
                "jsonrpc": "2.0",
                "id": 101,
                "method": "session/prompt",
                "params": prompt(sid, "permission"),
            }
        )
        asked = b.read_until(lambda m: m.get("method") == "session/request_permission")
        options = asked["params"]["options"]  # the fixture's option ids are new each time
        reject = next(o["optionId"] for o in options if o["kind"] == "reject_once")
        answer = {"outcome": {"outcome": "selected", "optionId": reject}}
        b.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
        assert answer_of(b, 101)["result"]["stopReason"] == "end_turn"
        said_b = [t for t in texts(b.notifications) if t.startswith("permission")]
        assert said_b[-1] == f"permission selected {reject} reject_once", said_b
        a.close()
        b.close()


def test_a_client_gone_with_the_question_unanswered_leaves_it_to_the_others(
    tmp_path: Path,
) -> None:
    with host(tmp_path, "permission_agent.py") as socket_path:
        gone = client(socket_path, "gone")
        stays = client(socket_path, "stays")
        sid = gone.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
            "sessionId"
        ]
        assert "result" in stays.request(
            "session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []}
        )
        gone.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/prompt",
                "params": prompt(sid, "permission"),
            }
        )
        gone.read_until(lambda m: m.get("method") == "session/request_permission")
        asked = stays.read_until(lambda m: m.get("method") == "session/request_permission")
        gone.sock.sendall(b'{"jsonrpc":"2.0","id":"half a li')  # and hangs up mid-line
        gone.close()
        allow = next(o["optionId"] for o in asked["params"]["options"] if o["kind"] == "allow_once")
        chosen = {"outcome": {"outcome": "selected", "optionId": allow}}
        stays.send({"jsonrpc": "2.0", "id": asked["id"], "result": chosen})
        ended = stays.read_until(
            lambda m: m.get("method") == "session/update" and "permission selected" in json.dumps(m)
        )
        assert allow in json.dumps(ended)
        listed = stays.request("session/list", {})["result"]["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]  # the conversation lives on
        stays.close()


def test_an_extension_request_naming_no_session_goes_to_the_one_attached_or_is_refused(
    tmp_path: Path,
) -> None:
    with host(tmp_path, "echo_agent.py") as socket_path:
        c = client(socket_path, "ext")
        none = c.request("_ext.example/hello", {"a": 1})
        assert none["error"]["code"] == -32602
        assert "names no sessionId and this connection has 0 sessions" in none["error"]["message"]
        new = {"cwd": str(tmp_path), "mcpServers": []}
        c.request("session/new", new)
        one = c.request("_ext.example/hello", {"a": 1})
        assert one["error"]["code"] == -32601, one  # the echo agent's own answer: it got there
        c.request("session/new", new)
        two = c.request("_ext.example/hello", {"a": 1})
        assert "this connection has 2 sessions" in two["error"]["message"], two
        c.close()


def test_extension_notifications_reach_the_running_agent(tmp_path: Path) -> None:
    """Named by sessionId (replaced by the agent's own), or naming none on a connection with
    one conversation (unchanged); one naming nothing relayable is dropped, and the connection
    goes on."""
    received = tmp_path / "received.ndjson"
    socket_path = tmp_path / "s" / "host.sock"
    process = start_serve(
        "--store", str(tmp_path / "q.db"), "--socket", str(socket_path), "--",
        *agent("ext_agent.py")[:-1], "--received", str(received),
    )  # fmt: skip
    try:
        c = client(socket_path, "ext")
        sid = c.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
            "sessionId"
        ]
        c.send({"jsonrpc": "2.0", "method": "_ext.example/note", "params": {"sessionId": sid}})
        c.send({"jsonrpc": "2.0", "method": "_ext.example/plain", "params": {"n": 1}})
        c.send({"jsonrpc": "2.0", "method": "not/ours", "params": {}})
        # A request relayed to the same agent after them: the host relays in arrival order
        # and the agent logs each line as it reads it, so its answer means both were logged.
        answered = c.request("_ext.example/hello", {"sessionId": sid})
        assert answered["result"]["got"] == {"sessionId": "ext-1"}, answered
        c.close()
        seen = [json.loads(x) for x in received.read_text().splitlines() if x.strip()]
    finally:
        stderr = finish(process, signal.SIGTERM)
    assert "Traceback" not in stderr, stderr
    notes = [m for m in seen if m.get("method", "").startswith("_ext.example/") and "id" not in m]
    assert notes == [
        {"jsonrpc": "2.0", "method": "_ext.example/note", "params": {"sessionId": "ext-1"}},
        {"jsonrpc": "2.0", "method": "_ext.example/plain", "params": {"n": 1}},
    ]
