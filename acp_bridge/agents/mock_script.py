"""Scripted replies for the offline mock model. Pure: parsing and choosing, no I/O.

A script is JSON::

    {"replies": [
        {"when": "hello", "say": "Hi! ...", "delay_ms": 20},
        {"when": "notes", "calls": [
            {"say": "Writing it.", "tools": [{"name": "write_file",
                                            "arguments": {"path": "notes.txt", "content": "x"}}]},
            {"say": "Done."}]},
        {"when": "slow", "say": "a long answer ...", "delay_ms": 200, "hang": true},
        {"when": "crash", "say": "about to fail", "crash": true},
        {"when": "busy", "error": {"type": "rate_limit", "times": 2}, "say": "finally"}
     ],
     "default": {"say": "You said: {prompt}"}}

The reply is the first whose ``when`` occurs (case-insensitive) in the latest user message; else
``default``; else an echo. A reply is a list of ``calls``, one per model request of the turn
(request *n* after the user message gets ``calls[n]``; past the end, an empty answer). A reply
written without ``calls`` is one call. A call may:

* ``think`` / ``say``: stream reasoning / answer text, one word per chunk, ``delay_ms`` apart
  (in ``say``, ``{prompt}`` becomes the user's text and ``{turns}`` the number of user
  messages the model was given, which shows whether a restored history reached it);
* ``tools``: ask for function calls (``name``, ``arguments``);
* ``hang``: after streaming, wait until the request is cancelled;
* ``crash``: after streaming, end the agent process at once (exit status 70);
* ``error``: fail the first ``times`` attempts (default 1) with a provider error of ``type``
  (``rate_limit``, ``auth``, ``context_window``, ``network``, ``bad_request``), then answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["ERROR_TYPES", "MockCall", "MockScript", "MockScriptError", "ToolRequest"]

ERROR_TYPES: Final = frozenset({"rate_limit", "auth", "context_window", "network", "bad_request"})
MAX_DELAY_MS: Final = 60_000


class MockScriptError(ValueError):
    """The script is not valid; the message says where."""


@dataclass(frozen=True)
class ToolRequest:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class MockCall:
    say: str = ""
    think: str = ""
    tools: tuple[ToolRequest, ...] = ()
    delay_ms: int = 0
    hang: bool = False
    crash: bool = False
    error_type: str | None = None
    error_message: str = ""
    error_times: int = 0


@dataclass(frozen=True)
class _Reply:
    when: str
    calls: tuple[MockCall, ...]


@dataclass
class MockScript:
    replies: tuple[_Reply, ...] = ()
    default: tuple[MockCall, ...] | None = None
    _failures: dict[tuple[int, int], int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> MockScript:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MockScriptError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise MockScriptError("the script must be a JSON object with 'replies'")
        raw_replies = data.get("replies", [])
        if not isinstance(raw_replies, list):
            raise MockScriptError("'replies' must be a list")
        replies = []
        for index, raw in enumerate(raw_replies):
            where = f"replies[{index}]"
            if not isinstance(raw, dict) or not isinstance(raw.get("when"), str):
                raise MockScriptError(f"{where} needs a string 'when'")
            replies.append(_Reply(raw["when"].lower(), _calls(raw, where)))
        default = data.get("default")
        if default is not None and not isinstance(default, dict):
            raise MockScriptError("'default' must be an object")
        return cls(tuple(replies), _calls(default, "default") if default is not None else None)

    @classmethod
    def echo(cls, text: str) -> MockScript:
        """A script that answers every prompt with ``text``."""
        return cls((), (MockCall(say=text),))

    def choose(self, messages: list[dict[str, Any]]) -> tuple[MockCall, int]:
        """The call for this model request, and how many earlier attempts of it failed
        (the caller records a failure with :meth:`failed`)."""
        prompt, request_number = _latest_prompt(messages)
        reply_index, calls = self._reply_for(prompt)
        if request_number >= len(calls):
            return MockCall(), 0
        call = calls[request_number]
        if call.say:
            turns = sum(1 for m in messages if m.get("role") == "user")
            say = call.say.replace("{prompt}", prompt).replace("{turns}", str(turns))
            call = _with_say(call, say)
        return call, self._failures.get((reply_index, request_number), 0)

    def failed(self, messages: list[dict[str, Any]]) -> None:
        prompt, request_number = _latest_prompt(messages)
        key = (self._reply_for(prompt)[0], request_number)
        self._failures[key] = self._failures.get(key, 0) + 1

    def _reply_for(self, prompt: str) -> tuple[int, tuple[MockCall, ...]]:
        lowered = prompt.lower()
        for index, reply in enumerate(self.replies):
            if reply.when in lowered:
                return index, reply.calls
        if self.default is not None:
            return -1, self.default
        return -2, (MockCall(say=f"You said: {prompt}"),)


def _with_say(call: MockCall, say: str) -> MockCall:
    from dataclasses import replace

    return replace(call, say=say)


def _latest_prompt(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The latest user message's text and how many assistant messages followed it."""
    after = 0
    for message in reversed(messages):
        role = message.get("role")
        if role == "user":
            content = message.get("content")
            return (content if isinstance(content, str) else _text_of(content)), after
        if role == "assistant":
            after += 1
    return "", after


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _calls(raw: dict[str, Any], where: str) -> tuple[MockCall, ...]:
    if "calls" in raw:
        calls = raw["calls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise MockScriptError(f"{where}.calls must be a list of objects")
        return tuple(_call(c, f"{where}.calls[{i}]") for i, c in enumerate(calls))
    return (_call(raw, where),)


def _call(raw: dict[str, Any], where: str) -> MockCall:
    say, think = raw.get("say", ""), raw.get("think", "")
    if not isinstance(say, str) or not isinstance(think, str):
        raise MockScriptError(f"{where}: 'say' and 'think' must be strings")
    delay = raw.get("delay_ms", 0)
    if not isinstance(delay, int) or not 0 <= delay <= MAX_DELAY_MS:
        raise MockScriptError(f"{where}: 'delay_ms' must be a whole number 0..{MAX_DELAY_MS}")
    tools = []
    for index, tool in enumerate(raw.get("tools", [])):
        if (
            not isinstance(tool, dict)
            or not isinstance(tool.get("name"), str)
            or not isinstance(tool.get("arguments", {}), dict)
        ):
            raise MockScriptError(f"{where}.tools[{index}] needs a 'name' and object 'arguments'")
        tools.append(ToolRequest(tool["name"], dict(tool.get("arguments", {}))))
    error = raw.get("error")
    error_type, error_message, error_times = None, "", 0
    if error is not None:
        if not isinstance(error, dict) or error.get("type") not in ERROR_TYPES:
            raise MockScriptError(f"{where}.error.type must be one of {sorted(ERROR_TYPES)}")
        error_type = str(error["type"])
        error_message = str(error.get("message", f"mock {error_type} error"))
        times = error.get("times", 1)
        if not isinstance(times, int) or times < 0:
            raise MockScriptError(f"{where}.error.times must be a whole number")
        error_times = times
    return MockCall(
        say=say,
        think=think,
        tools=tuple(tools),
        delay_ms=delay,
        hang=bool(raw.get("hang", False)),
        crash=bool(raw.get("crash", False)),
        error_type=error_type,
        error_message=error_message,
        error_times=error_times,
    )
