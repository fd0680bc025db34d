"""The reference agent's pure parts, without litellm or a process: the mock script, provider
error mapping, which tools a session offers, the history store, prompt text."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_bridge.agents.mock_script import MockScript, MockScriptError
from acp_bridge.agents.prompt import check_prompt, prompt_bytes, prompt_text
from acp_bridge.agents.provider_errors import (
    MAX_PROVIDER_MESSAGE,
    api_key_variable,
    is_rate_limit,
    to_rpc_error,
)
from acp_bridge.agents.store import PAGE_SIZE, HistoryStore
from acp_bridge.agents.tools import available_tools
from acp_bridge.errors import RpcError
from acp_bridge.wire.initialize import ClientCapabilities
from tests.lockstep import open_in_lockstep


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_mock_script_picks_the_reply_and_the_call_of_the_request() -> None:
    script = MockScript.parse(
        '{"replies": [{"when": "Notes", "calls": [{"say": "a", "tools": [{"name": "read_file",'
        ' "arguments": {"path": "x"}}]}, {"say": "b {turns}"}]}], "default": {"say": "{prompt}!"}}'
    )
    first, _ = script.choose([_user("write the notes")])
    assert first.say == "a" and first.tools[0].arguments == {"path": "x"}
    history = [_user("write the notes"), {"role": "assistant", "content": "a"}]
    second, _ = script.choose(history)
    assert second.say == "b 1"
    assert script.choose([*history, {"role": "assistant", "content": "b"}])[0].say == ""
    assert script.choose([_user("hi")])[0].say == "hi!"
    assert MockScript.echo("same").choose([_user("x")])[0].say == "same"


def test_mock_script_counts_failed_attempts() -> None:
    script = MockScript.parse(
        '{"replies": [{"when": "busy", "error": {"type": "rate_limit", "times": 2}, "say": "ok"}]}'
    )
    messages = [_user("busy?")]
    assert script.choose(messages)[1] == 0
    script.failed(messages)
    script.failed(messages)
    call, failures = script.choose(messages)
    assert failures == 2 == call.error_times  # the next attempt answers


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"replies": [{"say": "no when"}]}',
        '{"replies": [{"when": "x", "delay_ms": -1}]}',
        '{"replies": [{"when": "x", "error": {"type": "boom"}}]}',
        '{"replies": [{"when": "x", "tools": [{"arguments": {}}]}]}',
    ],
)
def test_a_bad_mock_script_is_refused_with_where(text: str) -> None:
    with pytest.raises(MockScriptError):
        MockScript.parse(text)


def _exception(name: str, *bases: type[BaseException]) -> type[Exception]:
    return type(name, bases or (Exception,), {})


def test_provider_errors_become_clear_rpc_errors() -> None:
    rate_limit = _exception("RateLimitError")
    wrapper = _exception("MidStreamFallbackError")
    inner = rate_limit("slow down")
    wrapped = wrapper("litellm.MidStreamFallbackError: slow down")
    wrapped.original_exception = inner  # type: ignore[attr-defined]
    assert is_rate_limit(inner) and is_rate_limit(wrapped)
    error = to_rpc_error(wrapped, "m")
    assert error.code == -32603 and error.data["kind"] == "rate_limit"
    assert "slow down" in error.message and "m:" in error.message

    auth = to_rpc_error(_exception("AuthenticationError")("bad key"), "m")
    assert auth.code == -32000 and auth.data["kind"] == "auth"
    assert auth.message == (
        "m: the provider refused the credentials (bad key); set the provider's API key"
    )
    assert auth.data["providerMessage"] == "bad key"
    claude = to_rpc_error(_exception("AuthenticationError")("x" * 900), "anthropic/claude-x")
    # a long provider message stays in data (and the agent's log)
    assert claude.message == (
        "anthropic/claude-x: the provider refused the credentials; set ANTHROPIC_API_KEY"
    )
    assert len(claude.data["providerMessage"]) == MAX_PROVIDER_MESSAGE
    missing = to_rpc_error(_exception("InternalServerError")("Missing credentials: api_key"), "m")
    assert missing.code == -32000
    overflow = to_rpc_error(
        _exception("ContextWindowExceededError", _exception("BadRequestError"))("too long"), "m"
    )
    assert overflow.data["kind"] == "context_window"
    long = to_rpc_error(_exception("APIConnectionError")("x" * 5000), "m")
    assert (
        long.data["kind"] == "network" and len(long.data["providerMessage"]) == MAX_PROVIDER_MESSAGE
    )
    bug = to_rpc_error(KeyError("secret/path"), "m")
    assert bug.data["kind"] == "internal" and "secret" not in bug.message


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("acp-mock/anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("gpt-4o-mini", "OPENAI_API_KEY"),
        ("openai/o3-mini", "OPENAI_API_KEY"),
        ("o4-mini", "OPENAI_API_KEY"),
        ("gemini/gemini-2.0-flash", "GEMINI_API_KEY"),
        ("openrouter/anthropic/claude-3.5-sonnet", "OPENROUTER_API_KEY"),
        ("groq/llama3-8b-8192", "GROQ_API_KEY"),
        ("ollama/llama3", None),
        ("some-local-model", None),
    ],
)
def test_the_key_variable_follows_the_models_provider(model: str, variable: str | None) -> None:
    assert api_key_variable(model) == variable


def test_tools_follow_the_client_capabilities_and_the_mode() -> None:
    def names(capabilities: dict[str, object], mode: str) -> list[str]:
        parsed = ClientCapabilities.parse(capabilities)
        return [tool.name for tool in available_tools(parsed, mode)]

    everything = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
    assert names(everything, "code") == ["read_file", "list_dir", "write_file", "run"]
    assert names(everything, "ask") == ["read_file", "list_dir"]
    assert names({"fs": {"readTextFile": True}}, "code") == ["read_file"]
    assert names({}, "code") == []


def test_the_history_store_keeps_sessions_private_and_pages_them(tmp_path: Path) -> None:
    path = tmp_path / "state" / "history.db"
    store = HistoryStore(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    for number in range(PAGE_SIZE + 2):
        store.create(f"s{number}", "/project" if number % 2 else "/other", "code", "m")
    store.append("s1", [("message", {"role": "user", "content": "hi"}), ("update", {"u": 1})])
    store.append("s1", [("message", {"role": "assistant", "content": "yo"})])
    assert [m["content"] for m in store.entries("s1", "message")] == ["hi", "yo"]
    assert store.entries("s1", "update") == [{"u": 1}]
    first, cursor = store.list(None, None)
    assert len(first) == PAGE_SIZE and first[0].id == "s1" and cursor is not None
    rest, end = store.list(None, cursor)
    assert len(rest) == 2 and end is None
    mine, _ = store.list("/project", None)
    assert all(s.cwd == "/project" for s in mine)
    store.update("s1", model="other", cost=0.5)
    stored = store.get("s1")
    assert stored is not None and (stored.model, stored.cost) == ("other", 0.5)
    store.close()


def test_agents_opening_one_new_history_at_once_all_open(tmp_path: Path) -> None:
    # Several built-in agents started together on a new history file: SQLite's switch to WAL
    # does not wait for a busy file, so all but one failed with "database is locked".
    paths = [tmp_path / f"history-{n}.db" for n in range(25)]
    assert open_in_lockstep(lambda path: HistoryStore(path).close(), paths) == []


def test_prompt_text_keeps_text_links_and_embedded_files() -> None:
    text = prompt_text(
        [
            {"type": "text", "text": "look"},
            {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"},
            {"type": "resource", "resource": {"uri": "file:///b.py", "text": "x = 1"}},
            {"type": "image", "data": "...", "mimeType": "image/png"},
        ]
    )
    assert text == "look\n[a.py](file:///a.py)\n<file uri='file:///b.py'>\nx = 1\n</file>"


def test_a_prompt_is_checked_for_advertised_types_and_utf8_bytes() -> None:
    text = {"type": "text", "text": "héllo"}  # every string value: 4 + 6 bytes
    link = {"type": "resource_link", "uri": "file:///a", "name": "a"}  # 13 + 9 + 1
    assert prompt_bytes([text, link], stop_past=100) == 33
    check_prompt([text, link, {"type": "resource", "resource": {"uri": "u", "blob": "AA"}}])
    check_prompt([text], max_bytes=10)
    with pytest.raises(RpcError) as over:
        check_prompt([text], max_bytes=9)
    assert over.value.code == -32602 and "9 bytes" in over.value.message
    for kind in ("image", "audio", "video"):
        with pytest.raises(RpcError) as refused:
            check_prompt([text, {"type": kind, "data": ""}])
        assert refused.value.code == -32602 and repr(kind) in refused.value.message
    check_prompt(["not a block", {"no": "type"}])  # left to the request's parser
    # The count stops early: a long string is past the bound by its length alone.
    assert prompt_bytes([{"type": "text", "text": "x" * 10_000}], stop_past=10) == 10_000
