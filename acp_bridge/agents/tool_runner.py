"""Running one tool call through the client, reported as ``tool_call`` / ``tool_call_update``.

Each call is announced (``tool_call``, pending), asks ``session/request_permission`` first if
it writes, runs or lists something (a listing is a command in the client's terminal; options
allow_once, allow_always, reject_once; ``allow_always`` is remembered for that tool for the rest
of the session), then runs (``in_progress``) and ends in exactly one terminal state
(``completed`` or ``failed``), also when the turn is cancelled under it: the last update is
then sent shielded, before the prompt's answer.

Paths stay inside the session's roots (``cwd`` and ``additionalDirectories``, symlinks resolved
on this machine, where the client that started the agent runs): a path outside fails the call
before any question or request. A file that does not exist is not read before it is written
(reading it would make the client answer an error, which clients show).

What goes back to the model is bounded: :data:`MAX_RESULT_CHARS` of a file or command output
(the rest is cut with a note saying so).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from acp_bridge.agents.tools import TOOLS, ToolSpec
from acp_bridge.errors import BridgeError, RpcError

__all__ = ["MAX_RESULT_CHARS", "ToolContext", "ToolOutcome", "TurnCancelled", "run_tool"]

log = logging.getLogger(__name__)

MAX_RESULT_CHARS: Final = 64 * 1024
OUTPUT_BYTE_LIMIT: Final = 256 * 1024
"""``outputByteLimit`` asked of the client's terminals."""
FINAL_UPDATE_TIMEOUT_S: Final = 1.0

Request = Callable[[str, dict[str, Any]], Awaitable[Any]]
Notify = Callable[[dict[str, Any]], Awaitable[None]]

PERMISSION_OPTIONS: Final = (
    {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
)


class TurnCancelled(Exception):
    """The client answered a permission request ``cancelled``: the turn is being cancelled."""


@dataclass
class ToolContext:
    session_id: str
    cwd: str
    request: Request
    notify: Notify
    always_allowed: set[str] = field(default_factory=set)
    can_read: bool = False
    roots: tuple[str, ...] = ()
    """The directories paths may point into: the session's ``cwd`` and its
    ``additionalDirectories`` (empty: ``cwd`` alone)."""

    def allowed_roots(self) -> tuple[str, ...]:
        return self.roots or (self.cwd,)


@dataclass
class ToolOutcome:
    result: str
    """What the model is told."""
    replay: dict[str, Any]
    """The call's final state as one ``tool_call`` update, for the session's history."""


_SPECS: Final = {tool.name: tool for tool in TOOLS}


async def run_tool(
    context: ToolContext, call_id: str, name: str, raw_arguments: str, offered: set[str]
) -> ToolOutcome:
    spec = _SPECS.get(name)
    try:
        arguments = json.loads(raw_arguments or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("arguments must be an object")
    except ValueError as exc:
        arguments, bad_arguments = {}, f"invalid arguments: {exc}"
    else:
        bad_arguments = ""
    state = _Call(context, call_id, spec, arguments)
    await state.announce(name)
    if spec is None or name not in offered:
        return await state.fail(f"the tool {name!r} is not available in this session")
    if bad_arguments:
        return await state.fail(bad_arguments)
    try:
        return await state.run()
    except anyio.get_cancelled_exc_class():
        with anyio.move_on_after(FINAL_UPDATE_TIMEOUT_S, shield=True):
            await state.update({"status": "failed"})
        raise
    except TurnCancelled:
        with anyio.move_on_after(FINAL_UPDATE_TIMEOUT_S, shield=True):
            await state.update({"status": "failed"})
        raise
    except (RpcError, BridgeError, KeyError, TypeError, ValueError) as exc:
        return await state.fail(f"{name} failed: {exc}")


class _Call:
    def __init__(
        self, context: ToolContext, call_id: str, spec: ToolSpec | None, arguments: dict[str, Any]
    ) -> None:
        self.context = context
        self.id = call_id
        self.spec = spec
        self.arguments = arguments
        self.snapshot: dict[str, Any] = {}

    def path(self, key: str = "path", *, resolved: bool = False) -> str:
        """The argument as an absolute path inside the session's roots (ValueError if not);
        ``resolved``: with symlinks resolved (what was checked against the roots)."""
        value = self.arguments.get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"'{key}' must be a non-empty string")
        path = os.path.normpath(os.path.join(self.context.cwd, value))
        real = os.path.realpath(path)
        roots = self.context.allowed_roots()
        if any(_inside(real, os.path.realpath(root)) for root in roots):
            return real if resolved else path
        raise ValueError(f"{value!r} is outside the session's directories ({', '.join(roots)})")

    async def announce(self, name: str) -> None:
        kind = self.spec.kind if self.spec else "other"
        start: dict[str, Any] = {
            "sessionUpdate": "tool_call",
            "toolCallId": self.id,
            "title": _title(name, self.arguments),
            "kind": kind,
            "status": "pending",
            "rawInput": self.arguments,
        }
        with contextlib.suppress(ValueError):
            start["locations"] = [{"path": self.path()}]
        self.snapshot = dict(start)
        await self.context.notify(start)

    async def update(self, fields: dict[str, Any]) -> None:
        self.snapshot.update(fields)
        await self.context.notify(
            {"sessionUpdate": "tool_call_update", "toolCallId": self.id, **fields}
        )

    async def fail(self, message: str) -> ToolOutcome:
        await self.update({"status": "failed", "content": [_text(message)]})
        return ToolOutcome(f"error: {message}", self.snapshot)

    async def done(self, result: str, fields: dict[str, Any]) -> ToolOutcome:
        await self.update({"status": "completed", **fields})
        return ToolOutcome(_bounded(result), self.snapshot)

    async def run(self) -> ToolOutcome:
        assert self.spec is not None
        name = self.spec.name
        if name == "read_file":
            return await self._read()
        if name == "list_dir":
            return await self._list()
        if name == "write_file":
            return await self._write()
        return await self._run_command()

    # -- the tools ------------------------------------------------------------------------

    async def _read(self) -> ToolOutcome:
        params: dict[str, Any] = {"sessionId": self.context.session_id, "path": self.path()}
        for key in ("line", "limit"):
            if isinstance(self.arguments.get(key), int):
                params[key] = self.arguments[key]
        await self.update({"status": "in_progress"})
        result = await self.context.request("fs/read_text_file", params)
        content = str(result.get("content", ""))
        return await self.done(content, {"content": [_text(_bounded(content))]})

    async def _write(self) -> ToolOutcome:
        path = self.path()
        new_text = self.arguments.get("content")
        if not isinstance(new_text, str):
            raise ValueError("'content' must be a string")
        old_text = await self._old_text(path)
        diff = {"type": "diff", "path": path, "oldText": old_text, "newText": new_text}
        if not await self._permitted({"content": [diff], "locations": [{"path": path}]}):
            return await self._rejected()
        await self.update({"status": "in_progress", "content": [diff]})
        await self.context.request(
            "fs/write_text_file",
            {"sessionId": self.context.session_id, "path": path, "content": new_text},
        )
        return await self.done(f"wrote {len(new_text)} characters to {path}", {})

    async def _old_text(self, path: str) -> str | None:
        if not self.context.can_read or not _is_file(path):
            return None  # a new file: asking the client would only get an error back
        try:
            result = await self.context.request(
                "fs/read_text_file", {"sessionId": self.context.session_id, "path": path}
            )
        except RpcError:
            return None  # a new file
        content = result.get("content") if isinstance(result, dict) else None
        return content if isinstance(content, str) else None

    async def _run_command(self) -> ToolOutcome:
        command = self.arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError("'command' must be a non-empty string")
        if not await self._permitted({}):
            return await self._rejected()
        return await self._in_terminal("sh", ["-c", command])

    async def _list(self) -> ToolOutcome:
        # The resolved path: what was checked against the roots is what ls lists.
        path = self.path(resolved=True)
        if not await self._permitted({"locations": [{"path": path}]}):
            return await self._rejected()
        return await self._in_terminal("ls", ["-1Ap", "--", path])

    async def _in_terminal(self, command: str, args: list[str]) -> ToolOutcome:
        session = {"sessionId": self.context.session_id}
        created = await self.context.request(
            "terminal/create",
            {
                **session,
                "command": command,
                "args": args,
                "cwd": self.context.cwd,
                "outputByteLimit": OUTPUT_BYTE_LIMIT,
            },
        )
        terminal = {**session, "terminalId": created["terminalId"]}
        try:
            await self.update(
                {
                    "status": "in_progress",
                    "content": [{"type": "terminal", "terminalId": terminal["terminalId"]}],
                }
            )
            exit_status = await self.context.request("terminal/wait_for_exit", terminal)
            output = await self.context.request("terminal/output", terminal)
        finally:
            with anyio.move_on_after(FINAL_UPDATE_TIMEOUT_S, shield=True):
                try:
                    await self.context.request("terminal/release", terminal)
                except (RpcError, BridgeError) as exc:
                    log.debug("terminal/release failed: %s", exc)
        text = str(output.get("output", ""))
        code = exit_status.get("exitCode")
        signal = exit_status.get("signal")
        ended = f"exit status {code}" if signal is None else f"killed by {signal}"
        result = f"{text}\n[{ended}{', output truncated' if output.get('truncated') else ''}]"
        if code == 0:
            return await self.done(result, {"rawOutput": {"exitCode": code}})
        await self.update({"status": "failed", "rawOutput": {"exitCode": code, "signal": signal}})
        return ToolOutcome(_bounded(result), self.snapshot)

    # -- permission -----------------------------------------------------------------------

    async def _permitted(self, shown: dict[str, Any]) -> bool:
        assert self.spec is not None
        if self.spec.name in self.context.always_allowed:
            return True
        tool_call = {
            "toolCallId": self.id,
            "title": self.snapshot.get("title", self.spec.name),
            "kind": self.spec.kind,
            "status": "pending",
            "rawInput": self.arguments,
            **shown,
        }
        answer = await self.context.request(
            "session/request_permission",
            {
                "sessionId": self.context.session_id,
                "toolCall": tool_call,
                "options": [dict(option) for option in PERMISSION_OPTIONS],
            },
        )
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
            raise TurnCancelled
        chosen = outcome.get("optionId")
        if chosen == "allow-always":
            self.context.always_allowed.add(self.spec.name)
        return chosen in ("allow", "allow-always")

    async def _rejected(self) -> ToolOutcome:
        await self.update({"status": "failed", "content": [_text("Rejected by the user.")]})
        return ToolOutcome(
            "The user rejected this tool call. Do not retry it; ask what to do instead.",
            self.snapshot,
        )


def _title(name: str, arguments: dict[str, Any]) -> str:
    if name == "run":
        return f"Run `{str(arguments.get('command', ''))[:80]}`"
    path = arguments.get("path")
    verb = {"read_file": "Read", "write_file": "Write", "list_dir": "List"}.get(name, name)
    return f"{verb} {path}" if isinstance(path, str) else verb


def _is_file(path: str) -> bool:
    """A stat on the machine the client runs on (it started this agent)."""
    return os.path.isfile(path)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _text(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}


def _bounded(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    cut = len(text) - MAX_RESULT_CHARS
    return text[:MAX_RESULT_CHARS] + f"\n[... {cut} more characters not shown]"
