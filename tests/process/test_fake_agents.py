"""The fake ACP agents in fixtures/agents/ do what their docs promise, for real.

Every test drives real agent processes through raw pipes with a small synchronous line reader.
Nothing sleeps to wait: positive checks wait on a read, a process exit or a connect-back socket,
each bounded by DEADLINE_S. Negative checks ("nothing arrives", "still alive") use a short
QUIET_S window, which can only make a broken agent pass by accident, never a good one fail.
Every process is killed (its whole process group) when the test ends.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

AGENTS = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
DEADLINE_S = 10.0  # upper bound for things that must happen (they take milliseconds)
QUIET_S = 0.3  # window for negative checks only
CLIENT_INFO = {"name": "test-fake-agents", "version": "0"}

Msg = dict[str, Any]


class AgentProc:
    """One fake agent process: JSON-RPC over raw pipes, read line by line with deadlines."""

    def __init__(self, script: str, flags: tuple[str, ...], stderr: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(AGENTS / script), *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self.extra_pids: list[int] = []  # processes outside the group (setsid grandchildren)
        self.noise: list[bytes] = []  # non-JSON lines skipped by read_msg
        self._buf = bytearray()
        self._pos = 0
        self._ids = itertools.count(1)
        self.eof = False

    # -- writing -----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg: Msg) -> None:
        self.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def request(self, method: str, params: Any = None) -> int:
        request_id = next(self._ids)
        msg: Msg = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return request_id

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def reply(self, request: Msg, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    def reply_error(self, request: Msg, code: int, message: str) -> None:
        error = {"code": code, "message": message}
        self.send({"jsonrpc": "2.0", "id": request["id"], "error": error})

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    # -- reading -----------------------------------------------------------------------

    def _fill(self, timeout: float) -> bool:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], max(timeout, 0))
        if not ready:
            return False
        data = os.read(fd, 1 << 20)
        if not data:
            self.eof = True
        if self._pos > (1 << 20) and self._pos > len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data
        return True

    def poll_line(self, timeout: float = QUIET_S) -> bytes | None:
        """The next raw line (without its newline), or None if none came within ``timeout``.

        Raises EOFError (carrying any unterminated bytes) when stdout is closed.
        """
        deadline = time.monotonic() + timeout
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end >= 0:
                line = bytes(self._buf[self._pos : end])
                self._pos = end + 1
                return line
            if self.eof:
                raise EOFError(bytes(self._buf[self._pos :]))
            if not self._fill(deadline - time.monotonic()):
                return None

    def read_line(self, timeout: float = DEADLINE_S) -> bytes:
        line = self.poll_line(timeout)
        if line is None:
            raise TimeoutError(f"no line from the agent within {timeout} s")
        return line

    def read_msg(self, timeout: float = DEADLINE_S) -> Msg:
        """The next JSON object; non-JSON lines are kept in ``self.noise`` and skipped."""
        while True:
            line = self.read_line(timeout)
            try:
                msg = json.loads(line)
            except ValueError:
                self.noise.append(line)
                continue
            assert isinstance(msg, dict), line
            return msg

    def read_msgs(self, n: int) -> list[Msg]:
        return [self.read_msg() for _ in range(n)]

    def until_response(self, request_id: Any) -> tuple[Msg, list[Msg]]:
        """Read up to the response to ``request_id``; also returns everything before it."""
        before: list[Msg] = []
        while True:
            msg = self.read_msg()
            if msg.get("id") == request_id and "method" not in msg:
                return msg, before
            before.append(msg)

    def read_until_eof(self) -> tuple[list[Msg], bytes]:
        """Every message until stdout closes, plus the unterminated tail."""
        msgs: list[Msg] = []
        try:
            while True:
                msgs.append(self.read_msg())
        except EOFError as exc:
            return msgs, exc.args[0]

    # -- ACP shortcuts -----------------------------------------------------------------

    def call(self, method: str, params: Any = None) -> Msg:
        response, before = self.until_response(self.request(method, params))
        assert before == [], before
        return response

    def result(self, method: str, params: Any = None) -> Any:
        response = self.call(method, params)
        assert "result" in response, response
        return response["result"]

    def initialize(self) -> Msg:
        params = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": CLIENT_INFO}
        result: Msg = self.result("initialize", params)
        return result

    def new_session(self, cwd: Path) -> str:
        session_id: str = self.result("session/new", {"cwd": str(cwd), "mcpServers": []})[
            "sessionId"
        ]
        return session_id

    def start_prompt(self, session_id: str, text: str) -> int:
        prompt = [{"type": "text", "text": text}]
        return self.request("session/prompt", {"sessionId": session_id, "prompt": prompt})

    def prompt(self, session_id: str, text: str) -> tuple[Msg, list[Msg]]:
        return self.until_response(self.start_prompt(session_id, text))

    def cancel(self, session_id: str) -> None:
        self.notify("session/cancel", {"sessionId": session_id})

    # -- process -----------------------------------------------------------------------

    def wait_exit(self, timeout: float = DEADLINE_S) -> int:
        return self.proc.wait(timeout)

    def is_alive_after(self, timeout: float = QUIET_S) -> bool:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return True
        return False

    def kill(self) -> None:
        for kill, target in [(os.killpg, self.pid), *((os.kill, p) for p in self.extra_pids)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)
        self.proc.wait(DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


def updates(msgs: list[Msg], kind: str | None = None) -> list[Msg]:
    """The ``update`` objects of the session/update notifications, optionally of one kind."""
    out = [m["params"]["update"] for m in msgs if m.get("method") == "session/update"]
    return [u for u in out if kind is None or u["sessionUpdate"] == kind]


def texts(msgs: list[Msg], kind: str = "agent_message_chunk") -> list[str]:
    return [u["content"]["text"] for u in updates(msgs, kind)]


class Liveness:
    """Connect-back server: processes say ``alive <pid> ...``; their death closes the socket."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conns: list[socket.socket] = []

    def accept(self) -> tuple[socket.socket, list[str]]:
        self.server.settimeout(DEADLINE_S)
        conn, _ = self.server.accept()
        self.conns.append(conn)
        conn.settimeout(DEADLINE_S)
        line = b""
        while not line.endswith(b"\n"):
            part = conn.recv(1)
            if not part:
                break
            line += part
        return conn, line.decode().split()

    def accept_many(self, n: int) -> dict[str, tuple[socket.socket, int]]:
        """Accept n peers, keyed 'agent' or 'grandchild' (order of arrival does not matter)."""
        peers: dict[str, tuple[socket.socket, int]] = {}
        for _ in range(n):
            conn, words = self.accept()
            assert words[0] == "alive", words
            role = words[2] if len(words) > 2 else "agent"
            peers[role] = (conn, int(words[1]))
        return peers

    @staticmethod
    def is_closed(conn: socket.socket, timeout: float) -> bool:
        conn.settimeout(timeout)
        try:
            return conn.recv(1) == b""
        except TimeoutError:
            return False

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.server.close()


Spawn = Callable[..., AgentProc]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    procs: list[AgentProc] = []
    counter = itertools.count()

    def _spawn(script: str, *flags: str, stderr: Any = None) -> AgentProc:
        if stderr is None:
            log = tmp_path / f"{script}.{next(counter)}.stderr"
            with open(log, "wb") as f:
                agent = AgentProc(script, flags, f)
        else:
            agent = AgentProc(script, flags, stderr)
        procs.append(agent)
        return agent

    try:
        yield _spawn
    finally:
        for agent in procs:
            agent.kill()


@pytest.fixture
def liveness() -> Iterator[Liveness]:
    live = Liveness()
    try:
        yield live
    finally:
        live.close()


def session_params(session_id: str, cwd: Path) -> Msg:
    return {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}


# --------------------------------------------------------------------------------------------
# Core protocol
# --------------------------------------------------------------------------------------------


def test_initialize_answers_version_capabilities_and_agent_info(spawn: Spawn) -> None:
    plain = spawn("echo_agent.py").initialize()
    assert plain["protocolVersion"] == 1
    assert plain["agentInfo"] == {"name": "echo-agent", "version": "0.1.0"}
    assert plain["authMethods"] == []
    caps = plain["agentCapabilities"]
    assert caps["loadSession"] is True
    assert set(caps["promptCapabilities"]) == {"image", "audio", "embeddedContext"}
    assert "resume" not in caps["sessionCapabilities"]
    assert {"list", "close"} <= set(caps["sessionCapabilities"])

    other = spawn("echo_agent.py", "--protocol-version", "2", "--no-load", "--resume-capable")
    result = other.initialize()
    assert result["protocolVersion"] == 2
    assert result["agentCapabilities"]["loadSession"] is False
    assert result["agentCapabilities"]["sessionCapabilities"]["resume"] == {}


def test_bad_input_gets_json_rpc_errors_and_notifications_get_nothing(
    spawn: Spawn, tmp_path: Path
) -> None:
    agent = spawn("echo_agent.py")
    not_utf8 = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"\xff"}}'
    for line, code in [
        (b"not json", -32700),
        (not_utf8, -32700),
        (b"[1,2]", -32600),
        (b"42", -32600),
        (b'{"jsonrpc":"2.0","id":5}', -32600),
    ]:
        agent.write(line + b"\n")
        answer = agent.read_msg()
        assert answer["error"]["code"] == code, line
        assert answer["id"] == (5 if b'"id":5' in line else None)
    agent.write(b"\n  \n")  # blank lines are skipped silently
    # Unknown notifications (extension or not) and a cancel for nothing produce no output:
    # the next line out is the answer to the following request.
    agent.notify("_vendor/notice", {"x": 1})
    agent.notify("session/cancel", {"sessionId": "sess_nope"})
    assert agent.call("_vendor/ext", {})["error"]["code"] == -32601
    assert agent.call("session/frobnicate", {})["error"]["code"] == -32601
    assert agent.call("initialize", {})["error"]["code"] == -32602
    assert agent.call("session/new", {"mcpServers": []})["error"]["code"] == -32602
    relative = {"cwd": "relative/dir", "mcpServers": []}
    assert agent.call("session/new", relative)["error"]["code"] == -32602
    assert agent.call("session/new", {"cwd": str(tmp_path)})["error"]["code"] == -32602
    prompt = {"sessionId": "sess_nope", "prompt": [{"type": "text", "text": "hi"}]}
    assert agent.call("session/prompt", prompt)["error"]["code"] == -32002
    assert agent.call("session/prompt", {"sessionId": "x"})["error"]["code"] == -32602


def test_echo_round_trips_the_prompt_text_with_one_message_id(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("echo_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    assert sid != agent.new_session(tmp_path)
    response, before = agent.prompt(sid, "hello  wide wörld ✓")
    assert response["result"] == {"stopReason": "end_turn"}
    chunks = updates(before, "agent_message_chunk")
    assert "".join(texts(before)) == "hello  wide wörld ✓"
    assert len(chunks) == 4  # streamed word by word
    assert len({c["messageId"] for c in chunks}) == 1
    assert all(m["params"]["sessionId"] == sid for m in before)
    # A second turn is a new message.
    _, before2 = agent.prompt(sid, "again")
    assert texts(before2) == ["again"]
    assert updates(before2)[0]["messageId"] != chunks[0]["messageId"]


def test_chunks_flag_and_flood_word_stream_many_updates(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("echo_agent.py", "--chunks", "10000")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    response, before = agent.prompt(sid, "ignored")
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == [f"flood-1-{i} " for i in range(10000)]

    plain = spawn("echo_agent.py")
    plain.initialize()
    sid = plain.new_session(tmp_path)
    _, before = plain.prompt(sid, "flood 300")
    assert texts(before) == [f"flood-1-{i} " for i in range(300)]


def test_require_auth_refuses_sessions_until_authenticate(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("echo_agent.py", "--require-auth")
    methods = agent.initialize()["authMethods"]
    assert [m["id"] for m in methods] == ["fake-login"]
    params = {"cwd": str(tmp_path), "mcpServers": []}
    assert agent.call("session/new", params)["error"]["code"] == -32000
    assert agent.call("authenticate", {"methodId": "other"})["error"]["code"] == -32602
    assert agent.result("authenticate", {"methodId": "fake-login"}) == {}
    assert agent.result("session/new", params)["sessionId"].startswith("sess_")


def test_load_replays_the_conversation_across_a_restart(spawn: Spawn, tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    first = spawn("echo_agent.py", "--history", str(history))
    first.initialize()
    sid = first.new_session(tmp_path)
    _, turn1 = first.prompt(sid, "first message")
    first.prompt(sid, "second one")
    first.close_stdin()
    assert first.wait_exit() == 0

    second = spawn("echo_agent.py", "--history", str(history), "--commands-update")
    second.initialize()
    # A session from the file is not live until loaded.
    assert second.prompt(sid, "too early")[0]["error"]["code"] == -32002
    response, replay = second.until_response(
        second.request("session/load", session_params(sid, tmp_path))
    )
    assert response["result"] == {}
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in updates(replay)] == [
        ("user_message_chunk", "first message"),
        ("agent_message_chunk", "first message"),
        ("user_message_chunk", "second one"),
        ("agent_message_chunk", "second one"),
    ]
    assert updates(replay)[1]["messageId"] == updates(turn1)[0]["messageId"]
    # available_commands_update comes after the load response, as claude-agent-acp does.
    assert updates([second.read_msg()])[0]["sessionUpdate"] == "available_commands_update"
    response, before = second.prompt(sid, "third")
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == ["third"]
    missing = second.call("session/load", session_params("sess_missing", tmp_path))
    assert missing["error"]["code"] == -32002
    listed = second.result("session/list", {})["sessions"]
    assert [s["sessionId"] for s in listed] == [sid]


def test_resume_restores_without_replay_and_gates_follow_capabilities(
    spawn: Spawn, tmp_path: Path
) -> None:
    history = tmp_path / "history.json"
    first = spawn("echo_agent.py", "--history", str(history))
    first.initialize()
    sid = first.new_session(tmp_path)
    first.prompt(sid, "remember me")
    first.close_stdin()
    assert first.wait_exit() == 0

    second = spawn("echo_agent.py", "--history", str(history), "--resume-capable", "--no-load")
    second.initialize()
    assert second.call("session/load", session_params(sid, tmp_path))["error"]["code"] == -32601
    assert second.result("session/resume", session_params(sid, tmp_path)) == {}  # no replay
    assert texts(second.prompt(sid, "after resume")[1]) == ["after ", "resume"]
    plain = spawn("echo_agent.py", "--history", str(history), "--load-result", "null")
    plain.initialize()
    assert plain.call("session/resume", session_params(sid, tmp_path))["error"]["code"] == -32601
    response, replay = plain.until_response(
        plain.request("session/load", session_params(sid, tmp_path))
    )
    assert response["result"] is None
    # The turn run after the resume was stored too.
    assert texts(replay, "user_message_chunk") == ["remember me", "after resume"]


def test_close_and_delete_end_a_session(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("slow_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    rid = agent.start_prompt(sid, "busy")
    assert texts([agent.read_msg()]) == ["busy"]
    # session/close cancels the running turn first.
    close_id = agent.request("session/close", {"sessionId": sid})
    got = [agent.read_msg(), agent.read_msg()]
    by_id = {m["id"]: m for m in got}
    assert by_id[rid]["result"] == {"stopReason": "cancelled"}
    assert by_id[close_id]["result"] == {}
    assert agent.prompt(sid, "closed")[0]["error"]["code"] == -32002
    assert agent.result("session/delete", {"sessionId": sid}) == {}
    assert agent.result("session/list", {})["sessions"] == []


def test_structured_update_words_send_their_update_kinds(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("echo_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    program = "thought hmm; plan; tool; tool in_progress; usage 1200 200000 0.25; trickle 3 1"
    response, before = agent.prompt(sid, program)
    assert response["result"] == {"stopReason": "end_turn"}
    kinds = [u["sessionUpdate"] for u in updates(before)]
    assert kinds == [
        "agent_thought_chunk",
        "plan",
        "tool_call",
        "tool_call_update",
        "tool_call_update",
        "tool_call",  # left open: in_progress, never completed
        "usage_update",
        "agent_message_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
    ]
    tool_updates = updates(before)[2:6]
    assert [u["status"] for u in tool_updates] == [
        "pending",
        "in_progress",
        "completed",
        "in_progress",
    ]
    assert tool_updates[0]["toolCallId"] != tool_updates[3]["toolCallId"]
    assert updates(before)[6]["cost"] == {"amount": 0.25, "currency": "USD"}
    assert texts(before) == [f"trickle-1-{i} " for i in range(3)]


def test_switches_for_ids_words_parallel_turns_and_replay_size(
    spawn: Spawn, tmp_path: Path
) -> None:
    history = tmp_path / "history.json"
    agent = spawn(
        "slow_agent.py",
        "--no-message-ids",
        "--no-prompt-words",
        "--busy",
        "parallel",
        "--history",
        str(history),
    )
    agent.initialize()
    sid = agent.new_session(tmp_path)
    first = agent.start_prompt(sid, "crash")  # just text here: prompt words are off
    assert updates([agent.read_msg()]) == [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "crash"}}
    ]
    second = agent.start_prompt(sid, "two")
    assert texts([agent.read_msg()]) == ["two"]
    agent.notify("$/cancel_request", {"requestId": first})  # ignored
    agent.cancel(sid)  # cancels both running turns
    answers = {m["id"]: m["result"] for m in (agent.read_msg(), agent.read_msg())}
    assert answers == {first: {"stopReason": "cancelled"}, second: {"stopReason": "cancelled"}}
    agent.close_stdin()
    assert agent.wait_exit() == 0

    big = spawn("echo_agent.py", "--history", str(history), "--replay-flood", "5000")
    big.initialize()
    response, replay = big.until_response(
        big.request("session/load", session_params(sid, tmp_path))
    )
    assert response["result"] == {}
    assert len(updates(replay)) == 5000 + 4
    assert texts(replay, "user_message_chunk") == ["crash", "two"]


# --------------------------------------------------------------------------------------------
# Cancel behaviours
# --------------------------------------------------------------------------------------------


def test_slow_agent_waits_for_cancel_and_answers_cancelled(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("slow_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    rid = agent.start_prompt(sid, "waiting")
    assert texts([agent.read_msg()]) == ["waiting"]
    assert agent.poll_line() is None  # really waiting
    # One prompt at a time per session.
    assert agent.prompt(sid, "second")[0]["error"]["code"] == -32600
    agent.cancel(sid)
    response, before = agent.until_response(rid)
    assert response["result"] == {"stopReason": "cancelled"}
    assert before == []
    # The session is usable again; prompt words work on the slow agent too.
    rid = agent.start_prompt(sid, "cancel-me")
    agent.cancel(sid)
    assert agent.until_response(rid)[0]["result"] == {"stopReason": "cancelled"}


def test_slow_agent_max_wait_ends_the_turn_by_itself(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("slow_agent.py", "--max-wait", "0.05")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    response, before = agent.prompt(sid, "patience")
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == ["patience"]


def test_echo_agent_cancel_words_choose_the_answer(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("echo_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    expected: list[tuple[str, Msg]] = [
        ("cancel-me", {"result": {"stopReason": "cancelled"}}),
        ("on-cancel end_turn; wait", {"result": {"stopReason": "end_turn"}}),
        ("on-cancel error; wait", {"error": {"code": -32603}}),
    ]
    for program, want in expected:
        rid = agent.start_prompt(sid, program)
        agent.cancel(sid)  # handled after the prompt: the turn exists already
        response = agent.until_response(rid)[0]
        if "result" in want:
            assert response["result"] == want["result"]
        else:
            assert response["error"]["code"] == want["error"]["code"]
    assert agent.prompt(sid, "stop max_tokens")[0]["result"] == {"stopReason": "max_tokens"}
    # A step that cannot parse its argument answers an error instead of hanging the turn.
    assert agent.prompt(sid, "flood lots")[0]["error"]["code"] == -32603
    assert agent.prompt(sid, "error -32002 gone")[0]["error"] == {"code": -32002, "message": "gone"}


def test_wrong_stop_agent_answers_end_turn_to_a_cancel(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("wrong_stop_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    rid = agent.start_prompt(sid, "go")
    assert texts([agent.read_msg()]) == ["go"]
    agent.cancel(sid)
    assert agent.until_response(rid)[0]["result"] == {"stopReason": "end_turn"}


def test_stubborn_agent_ignores_cancel_sigterm_and_stdin_eof(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("stubborn_agent.py", "--ignore-sigterm")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    agent.start_prompt(sid, "stuck")
    assert texts([agent.read_msg()]) == ["stuck"]
    agent.cancel(sid)
    assert agent.poll_line() is None  # no response, ever
    os.kill(agent.pid, signal.SIGTERM)
    assert agent.is_alive_after()
    agent.close_stdin()
    assert agent.is_alive_after()
    os.kill(agent.pid, signal.SIGKILL)
    assert agent.wait_exit() == -signal.SIGKILL


# --------------------------------------------------------------------------------------------
# Crashes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "status"),
    [
        (("--exit-code", "42"), 42),
        (("--signal", "KILL"), -signal.SIGKILL),
        (("--signal", "TERM", "--ignore-sigterm"), -signal.SIGTERM),
        (("--signal", "SEGV"), -signal.SIGSEGV),
    ],
)
def test_crashy_agent_dies_mid_turn(
    spawn: Spawn, tmp_path: Path, flags: tuple[str, ...], status: int
) -> None:
    agent = spawn("crashy_agent.py", *flags)
    agent.initialize()
    sid = agent.new_session(tmp_path)
    agent.start_prompt(sid, "doomed")
    msgs, tail = agent.read_until_eof()
    assert texts(msgs) == [f"before-crash-1-{i} " for i in range(3)]
    assert all("method" in m for m in msgs)  # no prompt response
    assert tail == b""
    assert agent.wait_exit() == status


def _history_with_two_turns(spawn: Spawn, tmp_path: Path, history: Path) -> str:
    agent = spawn("echo_agent.py", "--history", str(history))
    agent.initialize()
    sid = agent.new_session(tmp_path)
    agent.prompt(sid, "one")
    agent.prompt(sid, "two")
    agent.close_stdin()
    assert agent.wait_exit() == 0
    return sid


def test_crashy_agent_can_die_at_each_protocol_moment(spawn: Spawn, tmp_path: Path) -> None:
    init = spawn("crashy_agent.py", "--crash-on", "initialize", "--exit-code", "11")
    init.request("initialize", {"protocolVersion": 1})
    assert init.read_until_eof() == ([], b"")
    assert init.wait_exit() == 11

    new = spawn("crashy_agent.py", "--crash-on", "session/new", "--signal", "KILL")
    new.initialize()
    new.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    assert new.read_until_eof() == ([], b"")
    assert new.wait_exit() == -signal.SIGKILL

    history = tmp_path / "history.json"
    sid = _history_with_two_turns(spawn, tmp_path, history)
    load = spawn("crashy_agent.py", "--crash-on", "session/load", "--history", str(history))
    load.initialize()
    load.request("session/load", session_params(sid, tmp_path))
    msgs, _ = load.read_until_eof()
    assert texts(msgs, "user_message_chunk") + texts(msgs) == ["one", "one"]  # half the replay
    assert load.wait_exit() == 1

    for script in ("crashy_agent.py", "permission_agent.py"):
        perm = spawn(script, "--crash-on", "permission", "--exit-code", "9")
        perm.initialize()
        sid = perm.new_session(tmp_path)
        perm.start_prompt(sid, "please")
        msgs, _ = perm.read_until_eof()
        assert [m["method"] for m in msgs] == ["session/update", "session/request_permission"]
        assert perm.wait_exit() == 9


def test_crash_after_turns_lets_the_first_turn_finish(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("crashy_agent.py", "--crash-after-turns", "1", "--exit-code", "5")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    response, before = agent.prompt(sid, "fine")
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == ["fine"]
    agent.start_prompt(sid, "not fine")
    msgs, _ = agent.read_until_eof()
    assert texts(msgs) == [f"before-crash-2-{i} " for i in range(3)]
    assert agent.wait_exit() == 5


def test_crash_once_file_lets_the_restarted_agent_behave(spawn: Spawn, tmp_path: Path) -> None:
    marker = tmp_path / "crashed-once"
    history = tmp_path / "history.json"
    flags = ("--crash-once-file", str(marker), "--history", str(history), "--signal", "KILL")
    first = spawn("crashy_agent.py", *flags)
    first.initialize()
    sid = first.new_session(tmp_path)
    first.start_prompt(sid, "boom")
    first.read_until_eof()
    assert first.wait_exit() == -signal.SIGKILL
    assert marker.exists()

    second = spawn("crashy_agent.py", *flags)
    second.initialize()
    response, replay = second.until_response(
        second.request("session/load", session_params(sid, tmp_path))
    )
    assert texts(replay, "user_message_chunk") == ["boom"]  # the cut turn's prompt is kept
    response, before = second.prompt(sid, "works now")
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == ["works ", "now"]


@pytest.mark.parametrize(("word", "status"), [("crash 7", 7), ("crash KILL", -signal.SIGKILL)])
def test_crash_prompt_word_kills_any_agent(
    spawn: Spawn, tmp_path: Path, word: str, status: int
) -> None:
    agent = spawn("echo_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    agent.start_prompt(sid, f"echo last words; {word}")
    msgs, _ = agent.read_until_eof()
    assert texts(msgs) == ["last ", "words"]
    assert agent.wait_exit() == status


def test_hang_on_and_fail_on_shape_single_methods(spawn: Spawn, tmp_path: Path) -> None:
    hang = spawn("echo_agent.py", "--hang-on", "initialize")
    hang.request("initialize", {"protocolVersion": 1})
    assert hang.poll_line() is None
    assert hang.result("session/list", {}) == {"sessions": []}  # still serving the rest

    fail = spawn("echo_agent.py", "--fail-on", "session/load=-32603", "--fail-on", "session/new")
    fail.initialize()
    assert fail.call("session/load", session_params("s", tmp_path))["error"]["code"] == -32603
    params = {"cwd": str(tmp_path), "mcpServers": []}
    assert fail.call("session/new", params)["error"]["code"] == -32603


# --------------------------------------------------------------------------------------------
# Agent -> client requests
# --------------------------------------------------------------------------------------------


def test_permission_agent_offers_a_reject_first_and_reports_the_outcome(
    spawn: Spawn, tmp_path: Path
) -> None:
    agent = spawn("permission_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)

    def ask() -> tuple[int, Msg, Msg]:
        rid = agent.start_prompt(sid, "may I?")
        tool_call = updates([agent.read_msg()])[0]
        request = agent.read_msg()
        assert request["method"] == "session/request_permission"
        return rid, tool_call, request

    rid, tool_call, request = ask()
    assert request["id"] == 0  # the agent's own id space starts at the falsy 0
    assert tool_call["sessionUpdate"] == "tool_call"
    assert tool_call["status"] == "pending"
    params = request["params"]
    assert params["sessionId"] == sid
    assert params["toolCall"]["toolCallId"] == tool_call["toolCallId"]
    assert {"title", "kind"} <= set(params["toolCall"])
    options = params["options"]
    kinds = [o["kind"] for o in options]
    assert kinds == ["reject_always", "allow_once", "reject_once", "allow_always"]
    assert not kinds[0].startswith("allow")
    ids = [o["optionId"] for o in options]
    assert len(set(ids)) == 4
    assert not any(word in i for i in ids for word in ("allow", "reject", "once", "always"))
    by_kind = {o["kind"]: o["optionId"] for o in options}

    agent.reply(request, {"outcome": {"outcome": "selected", "optionId": by_kind["allow_once"]}})
    response, before = agent.until_response(rid)
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == [f"permission selected {by_kind['allow_once']} allow_once"]
    statuses = [u["status"] for u in updates(before, "tool_call_update")]
    assert statuses == ["in_progress", "completed"]

    rid, _, request = ask()
    rejected = {o["kind"]: o["optionId"] for o in request["params"]["options"]}["reject_always"]
    agent.reply(request, {"outcome": {"outcome": "selected", "optionId": rejected}})
    response, before = agent.until_response(rid)
    assert texts(before) == [f"permission selected {rejected} reject_always"]
    assert [u["status"] for u in updates(before, "tool_call_update")] == ["failed"]

    rid, _, request = ask()
    agent.reply_error(request, -32601, "no permissions here")
    response, before = agent.until_response(rid)
    assert texts(before) == ["permission error -32601 no permissions here"]

    # Cancel while the permission is pending: the client answers it cancelled, the turn too.
    rid, _, request = ask()
    agent.cancel(sid)
    agent.reply(request, {"outcome": {"outcome": "cancelled"}})
    response, before = agent.until_response(rid)
    assert texts(before) == ["permission cancelled"]
    assert response["result"] == {"stopReason": "cancelled"}


def test_permission_agent_string_ids_and_custom_order(spawn: Spawn, tmp_path: Path) -> None:
    order = "reject_once,allow_always,allow_once,reject_always"
    agent = spawn("permission_agent.py", "--id-style", "str", "--permission-kinds", order)
    agent.initialize()
    sid = agent.new_session(tmp_path)
    agent.start_prompt(sid, "x")
    agent.read_msg()
    request = agent.read_msg()
    assert request["id"] == "agent-req-0"
    assert ",".join(o["kind"] for o in request["params"]["options"]) == order


def test_fs_agent_reads_and_writes_through_the_client(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("fs_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    target = tmp_path / "note.txt"

    rid = agent.start_prompt(sid, f"write {target} hello fs")
    tool_call = updates([agent.read_msg()])[0]
    assert (tool_call["kind"], tool_call["status"]) == ("edit", "in_progress")
    request = agent.read_msg()
    assert request["method"] == "fs/write_text_file"
    assert request["params"] == {"sessionId": sid, "path": str(target), "content": "hello fs"}
    target.write_text(request["params"]["content"])
    agent.reply(request, None)
    response, before = agent.until_response(rid)
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == ["write-ok"]
    assert updates(before, "tool_call_update")[0]["status"] == "completed"

    rid = agent.start_prompt(sid, f"read {target} 1 5")
    agent.read_msg()
    request = agent.read_msg()
    assert request["method"] == "fs/read_text_file"
    assert request["params"] == {"sessionId": sid, "path": str(target), "line": 1, "limit": 5}
    agent.reply(request, {"content": target.read_text()})
    assert texts(agent.until_response(rid)[1]) == ["read-ok hello fs"]

    rid = agent.start_prompt(sid, f"read {tmp_path / 'missing.txt'}")
    agent.read_msg()
    agent.reply_error(agent.read_msg(), -32002, "Resource not found")
    _, before = agent.until_response(rid)
    assert texts(before) == ["read-error -32002 Resource not found"]
    assert updates(before, "tool_call_update")[0]["status"] == "failed"


# --------------------------------------------------------------------------------------------
# Late updates
# --------------------------------------------------------------------------------------------


def test_late_agent_keeps_sending_after_the_response(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("late_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    response, before = agent.prompt(sid, "hi")
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == ["hi"]
    late = agent.read_msgs(1000)
    assert texts(late) == [f"late-1-{i}" for i in range(1000)]
    assert {u["messageId"] for u in updates(late)} == {updates(before)[0]["messageId"]}

    rid = agent.start_prompt(sid, "late 50; wait")
    agent.cancel(sid)
    response, before = agent.until_response(rid)
    assert response["result"] == {"stopReason": "cancelled"}
    assert before == []
    assert texts(agent.read_msgs(50)) == [f"late-2-{i}" for i in range(50)]
    assert agent.poll_line() is None


# --------------------------------------------------------------------------------------------
# Process hygiene: stderr, stdout noise, oversized lines, forks, garbage
# --------------------------------------------------------------------------------------------


def test_stderr_flood_blocks_until_drained_and_ends_with_a_marker(
    spawn: Spawn, tmp_path: Path
) -> None:
    agent = spawn("stderr_flood_agent.py", "--stderr-flood", "2", stderr=subprocess.PIPE)
    rid = agent.request("initialize", {"protocolVersion": 1})
    assert agent.poll_line() is None  # blocked writing stderr: nobody drains it yet

    collected = bytearray()
    stderr = agent.proc.stderr
    assert stderr is not None

    def drain() -> None:
        while chunk := os.read(stderr.fileno(), 1 << 16):
            collected.extend(chunk)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    assert agent.until_response(rid)[0]["result"]["protocolVersion"] == 1
    sid = agent.new_session(tmp_path)
    response, before = agent.prompt(sid, "still here")
    assert response["result"] == {"stopReason": "end_turn"}
    assert texts(before) == ["still ", "here"]
    agent.close_stdin()
    assert agent.wait_exit() == 0
    drainer.join(DEADLINE_S)
    lines = bytes(collected).splitlines()
    size = 2 * 1024 * 1024
    assert f"STDERR-FLOOD-END initialize {size}".encode() in lines
    assert lines[-1] == f"STDERR-FLOOD-END turn-1 {size}".encode()
    assert len(collected) > 2 * size


def test_noisy_agent_prints_non_json_between_messages(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("noisy_agent.py")
    banner = agent.read_line()
    with pytest.raises(ValueError):
        json.loads(banner)
    agent.initialize()
    sid = agent.new_session(tmp_path)
    response, before = agent.prompt(sid, "the noise does not hurt")
    assert response["result"] == {"stopReason": "end_turn"}
    assert "".join(texts(before)) == "the noise does not hurt"
    # One noise line before each message read so far (initialize, session/new, the turn).
    assert len(agent.noise) == 2 + len(before) + 1
    assert b"{this is not json either" in agent.noise


def test_oversized_lines_have_the_exact_requested_size(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("echo_agent.py", "--oversized", "200000")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    rid = agent.start_prompt(sid, "huge 100000")
    first, second = agent.read_line(), agent.read_line()
    assert len(first) + 1 == 200000
    assert len(second) + 1 == 100000
    assert texts([json.loads(first)])[0].startswith("huge-1:xxx")
    assert agent.until_response(rid)[0]["result"] == {"stopReason": "end_turn"}


@pytest.mark.parametrize("mode", ["subprocess", "fork"])
def test_forking_agent_grandchild_holds_stdout_after_the_agent_dies(
    spawn: Spawn, liveness: Liveness, tmp_path: Path, mode: str
) -> None:
    agent = spawn("forking_agent.py", "--connect-back", str(liveness.port), "--fork-mode", mode)
    peers = liveness.accept_many(2)
    agent_conn, agent_pid = peers["agent"]
    child_conn, child_pid = peers["grandchild"]
    assert agent_pid == agent.pid
    assert os.getpgid(child_pid) == agent.pid
    agent.initialize()
    sid = agent.new_session(tmp_path)
    assert texts(agent.prompt(sid, "forked")[1]) == ["forked"]

    os.kill(agent.pid, signal.SIGKILL)
    assert agent.wait_exit() == -signal.SIGKILL
    assert liveness.is_closed(agent_conn, DEADLINE_S)
    assert not liveness.is_closed(child_conn, QUIET_S)
    assert agent.poll_line() is None  # no EOF: the grandchild holds the pipe
    assert not agent.eof

    os.killpg(agent.pid, signal.SIGKILL)  # the group lives on in the grandchild
    assert liveness.is_closed(child_conn, DEADLINE_S)
    assert agent.read_until_eof() == ([], b"")


def test_forking_agent_orphan_exit_leaves_only_the_grandchild(
    spawn: Spawn, liveness: Liveness
) -> None:
    agent = spawn("forking_agent.py", "--orphan-exit", "--connect-back", str(liveness.port))
    peers = liveness.accept_many(2)
    assert agent.wait_exit() == 0
    assert liveness.is_closed(peers["agent"][0], DEADLINE_S)
    assert not liveness.is_closed(peers["grandchild"][0], QUIET_S)
    assert agent.poll_line() is None
    assert not agent.eof
    os.killpg(agent.pid, signal.SIGKILL)
    assert liveness.is_closed(peers["grandchild"][0], DEADLINE_S)


def test_setsid_grandchild_escapes_a_group_kill(spawn: Spawn, liveness: Liveness) -> None:
    agent = spawn("forking_agent.py", "--setsid-grandchild", "--connect-back", str(liveness.port))
    peers = liveness.accept_many(2)
    child_conn, child_pid = peers["grandchild"]
    agent.extra_pids.append(child_pid)
    assert os.getsid(child_pid) == child_pid
    os.killpg(agent.pid, signal.SIGKILL)
    assert liveness.is_closed(peers["agent"][0], DEADLINE_S)
    assert not liveness.is_closed(child_conn, QUIET_S)
    os.kill(child_pid, signal.SIGKILL)
    assert liveness.is_closed(child_conn, DEADLINE_S)


def test_spawn_word_starts_a_grandchild_mid_turn(
    spawn: Spawn, liveness: Liveness, tmp_path: Path
) -> None:
    agent = spawn("echo_agent.py", "--connect-back", str(liveness.port))
    agent_conn, _ = liveness.accept()
    agent.initialize()
    sid = agent.new_session(tmp_path)
    _, before = agent.prompt(sid, "spawn")
    child_conn, words = liveness.accept()
    assert texts(before) == [f"spawned {words[1]}"]
    agent.close_stdin()
    assert agent.wait_exit() == 0
    assert liveness.is_closed(agent_conn, DEADLINE_S)  # death proven by the socket
    assert not liveness.is_closed(child_conn, QUIET_S)


def test_garbage_agent_emits_each_kind_of_bad_framing(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("garbage_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    rid = agent.start_prompt(
        sid, "non-utf8; non-object; batch; unknown-id; split-line; crlf; duplicate-response"
    )
    bad = agent.read_line()
    assert bad.startswith(b'{"jsonrpc":"2.0","method":"session/update"')
    with pytest.raises(UnicodeDecodeError):
        bad.decode("utf-8")
    assert [agent.read_line() for _ in range(3)] == [b"42", b'"not an object"', b"null"]
    batch = json.loads(agent.read_line())
    assert isinstance(batch, list)
    assert texts(batch) == ["batch-1", "batch-2"]
    assert json.loads(agent.read_line()) == {
        "jsonrpc": "2.0",
        "id": 987650001,
        "result": {"stopReason": "end_turn"},
    }
    assert texts([json.loads(agent.read_line())]) == ["split-€-😀-end"]
    crlf = agent.read_line()
    assert crlf.endswith(b"}\r")
    assert texts([json.loads(crlf)]) == ["crlf"]
    first, second = agent.read_msg(), agent.read_msg()
    assert first == second == {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}}


def test_garbage_agent_truncated_line_then_exit(spawn: Spawn, tmp_path: Path) -> None:
    agent = spawn("garbage_agent.py")
    agent.initialize()
    sid = agent.new_session(tmp_path)
    agent.start_prompt(sid, "truncated 6")
    msgs, tail = agent.read_until_eof()
    assert msgs == []
    assert tail.startswith(b'{"jsonrpc":"2.0"')
    assert agent.wait_exit() == 6


def test_close_stdout_keeps_the_process_alive(spawn: Spawn, tmp_path: Path) -> None:
    at_start = spawn("garbage_agent.py", "--close-stdout")
    assert at_start.read_until_eof() == ([], b"")
    assert at_start.is_alive_after()
    at_start.close_stdin()
    assert at_start.wait_exit() == 0

    mid_turn = spawn("garbage_agent.py")
    mid_turn.initialize()
    sid = mid_turn.new_session(tmp_path)
    mid_turn.start_prompt(sid, "echo bye; close-stdout")
    msgs, _ = mid_turn.read_until_eof()
    assert texts(msgs) == ["bye"]
    assert mid_turn.is_alive_after()
    mid_turn.close_stdin()
    assert mid_turn.wait_exit() == 0
