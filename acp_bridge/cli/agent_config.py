"""Named agents, parsed and checked: the built-in table, the TOML config file, the ACP
registry's ``registry.json``, and ``--mcp`` values. Pure: text in, values out (no files, no
environment; the caller passes a ``which`` function to look a program up on PATH).

Every error is a :class:`ConfigError` naming the file, the line and the fix.

The config file (TOML)::

    registry = "~/acp/registry.json"   # optional: agents of the ACP registry's format

    [agents.claude]                    # a name for --agent
    command = "claude-agent-acp"       # the program (looked up on PATH) ...
    args = []                          # ... and its arguments
    env = { ANTHROPIC_LOG = "debug" }  # added to the agent's environment

    [agents.claude.defaults]           # options used unless given on the command line
    grace = 10
    permission = "allow-reads"
    allow_fs = true

    [[agents.claude.mcp_servers]]      # stdio MCP servers passed in session/new|load|resume
    name = "files"
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
    env = { LOG = "1" }

An entry without ``command`` adjusts the built-in or registry agent of the same name (its
defaults, env and MCP servers are merged in); one with ``command`` replaces it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final

__all__ = [
    "DEFAULT_KEYS",
    "TOO_DEEP",
    "AgentEntry",
    "ConfigError",
    "ConfigFile",
    "argv_problem",
    "env_problem",
    "exec_text_problem",
    "merge_entry",
    "parse_config",
    "parse_mcp_option",
]

Which = Callable[[str], "str | None"]

MAX_CONFIG_BYTES: Final = 1024 * 1024
"""A config or registry file larger than this is refused (the caller reads at most this + 1)."""

TOO_DEEP: Final = "nested too deeply to read"
"""A config or registry file whose arrays or tables nest deeper than the parser recurses."""


class ConfigError(Exception):
    """A config or registry file that can't be used: where (file and line) and the fix."""

    def __init__(self, path: str, line: int | None, problem: str, fix: str) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {problem}; {fix}")
        self.path = path
        self.line = line


@dataclass(frozen=True)
class AgentEntry:
    """One named agent. ``argv`` empty means "adjusts the agent of this name below it"."""

    name: str
    source: str  # "builtin", "registry" or "config"
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    mcp_servers: tuple[dict[str, Any], ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    origin: str = ""  # where it is defined: a doc URL, or file:line


@dataclass(frozen=True)
class ConfigFile:
    path: str
    agents: dict[str, AgentEntry]
    registry: str | None  # as written; relative to the config file's directory


# -- default options -------------------------------------------------------------------------------

_DURATIONS: Final = ("grace", "turn_timeout", "idle_timeout", "startup_timeout")
_PERMISSIONS: Final = ("ask", "deny", "allow-reads", "allow-all")

DEFAULT_KEYS: Final = (
    *_DURATIONS,
    "max_restarts",
    "max_message_bytes",
    "permission",
    "allow_fs",
    "allow_terminal",
    "auth_method",
    "json",
)
"""The options a named agent may default (the argparse ``dest`` names; ``-`` also accepted)."""


def _check_default(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for ``key``, or None."""
    if key == "startup_timeout":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        return None if ok else "must be a number of seconds > 0"
    if key in _DURATIONS:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        return None if ok else "must be a number of seconds >= 0 (0 = off for timeouts)"
    if key in ("max_restarts", "max_message_bytes"):
        least = 1 if key == "max_message_bytes" else 0
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= least
        return None if ok else f"must be a whole number >= {least}"
    if key == "permission":
        return None if value in _PERMISSIONS else "must be one of " + ", ".join(_PERMISSIONS)
    if key in ("allow_fs", "allow_terminal", "json"):
        return None if isinstance(value, bool) else "must be true or false"
    return None if isinstance(value, str) and value else "must be a non-empty string"


# -- the config file -------------------------------------------------------------------------------


def parse_config(text: str, path: str) -> ConfigFile:
    """Parse and check a config file's text (``path`` is only used in messages)."""
    import tomllib  # here: a run without a config file (most one-shots) never needs it

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = _decode_error_line(str(exc))
        raise ConfigError(path, line, f"not valid TOML ({exc})", "fix the syntax there") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError(path, None, TOO_DEEP, "is it the right file?") from None
    where = _Locator(text)
    unknown = sorted(set(data) - {"registry", "agents"})
    if unknown:
        raise ConfigError(
            path,
            where.line([], unknown[0]),
            f"unknown top-level key {unknown[0]!r}",
            'the top level holds only registry = "FILE" and [agents.NAME] tables',
        )
    registry = data.get("registry")
    if registry is not None and (
        not isinstance(registry, str) or not registry or exec_text_problem(registry)
    ):
        raise ConfigError(
            path,
            where.line([], "registry"),
            "registry must be a file name (text without NUL bytes)",
            'e.g. registry = "registry.json"',
        )
    agents = data.get("agents", {})
    if not isinstance(agents, dict):
        raise ConfigError(
            path, where.line([], "agents"), "agents must be a table", "write [agents.NAME] tables"
        )
    parsed = {name: _agent(path, where, name, body) for name, body in agents.items()}
    return ConfigFile(path=path, agents=parsed, registry=registry)


def _agent(path: str, where: _Locator, name: str, body: Any) -> AgentEntry:
    table = ["agents", name]
    origin = f"{path}:{where.line(table, None) or 1}"

    def fail(
        key: str | None, problem: str, fix: str, sub: list[str] | None = None, nth: int = 0
    ) -> ConfigError:
        line = where.line(sub or table, key, nth) or where.line(table, None)
        return ConfigError(path, line, f"[agents.{name}] {problem}", fix)

    if not isinstance(body, dict):
        raise fail(None, "is not a table", f"write [agents.{name}] with command = ...")
    known = {"command", "args", "env", "defaults", "mcp_servers", "description"}
    for key in body:
        if key not in known:
            raise fail(
                key, f"has an unknown key {key!r}", "known keys: " + ", ".join(sorted(known))
            )
    command = body.get("command")
    if command is not None and (not isinstance(command, str) or not command):
        raise fail("command", "command must be a program name", 'e.g. command = "my-agent"')
    if command is not None and (problem := exec_text_problem(command)):
        raise fail("command", f"command {problem}", "fix the value")
    args = body.get("args", [])
    if not _strings(args):
        raise fail("args", "args must be a list of strings", 'e.g. args = ["--acp"]')
    if problem := _args_problem(args):
        raise fail("args", problem, "fix the value")
    if args and command is None:
        raise fail("args", "has args but no command", "add command = ... (args go with a command)")
    env = _env_table(
        body.get("env", {}), lambda p: fail("env", p, 'write env = { NAME = "value" }')
    )
    defaults = _defaults(body.get("defaults", {}), table, fail)
    servers = _mcp_servers(body.get("mcp_servers", []), table, fail)
    description = body.get("description", "")
    if not isinstance(description, str):
        raise fail("description", "description must be a string", 'e.g. description = "..."')
    argv = (command, *args) if command else ()
    return AgentEntry(name, "config", argv, env, servers, defaults, description, origin)


def _defaults(body: Any, table: list[str], fail: Callable[..., ConfigError]) -> dict[str, Any]:
    sub = [*table, "defaults"]
    if not isinstance(body, dict):
        raise fail("defaults", "defaults must be a table", "write a [agents.NAME.defaults] table")
    defaults: dict[str, Any] = {}
    for raw_key, value in body.items():
        key = raw_key.replace("-", "_")
        if key not in DEFAULT_KEYS:
            raise fail(
                raw_key,
                f"unknown default option {raw_key!r}",
                "known: " + ", ".join(DEFAULT_KEYS),
                sub,
            )
        problem = _check_default(key, value)
        if problem:
            raise fail(raw_key, f"default {raw_key} = {value!r} {problem}", "fix the value", sub)
        defaults[key] = value
    return defaults


def _mcp_servers(
    body: Any, table: list[str], fail: Callable[..., ConfigError]
) -> tuple[dict[str, Any], ...]:
    sub = [*table, "mcp_servers"]
    fix = 'write [[agents.NAME.mcp_servers]] with name = "...", command = "...", args = [...]'
    if not isinstance(body, list):
        raise fail("mcp_servers", "mcp_servers must be an array of tables", fix)
    servers: list[dict[str, Any]] = []
    for index, server in enumerate(body):

        def line_fail(problem: str, fix: str, nth: int = index) -> ConfigError:
            return fail(None, problem, fix, sub, nth)

        if not isinstance(server, dict):
            raise fail("mcp_servers", f"mcp_servers[{index}] is not a table", fix)
        extra = set(server) - {"name", "command", "args", "env"}
        if extra:
            raise line_fail(f"mcp_servers[{index}] has an unknown key {sorted(extra)[0]!r}", fix)
        name, command = server.get("name"), server.get("command")
        if not isinstance(name, str) or not name:
            raise line_fail(f"mcp_servers[{index}] has no name", 'add name = "..."')
        if not isinstance(command, str) or not command:
            raise line_fail(f"MCP server {name!r} has no command", 'add command = "..."')
        if problem := exec_text_problem(command):
            raise line_fail(f"MCP server {name!r}: command {problem}", "fix the value")
        args = server.get("args", [])
        if not _strings(args):
            raise line_fail(f"MCP server {name!r}: args must be a list of strings", fix)
        if problem := _args_problem(args):
            raise line_fail(f"MCP server {name!r}: {problem}", "fix the value")
        env = _env_table(server.get("env", {}), partial(_prefixed, line_fail, name, fix))
        if any(s["name"] == name for s in servers):
            raise line_fail(f"two MCP servers are named {name!r}", "give each a different name")
        servers.append(mcp_server(name, command, list(args), env))
    return tuple(servers)


def _prefixed(
    fail: Callable[[str, str], ConfigError], server: str, fix: str, problem: str
) -> ConfigError:
    return fail(f"MCP server {server!r}: {problem}", fix)


def _env_table(body: Any, fail: Callable[[str], ConfigError]) -> dict[str, str]:
    if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
        raise fail("env must map names to string values")
    problem = env_problem(body)
    if problem:
        raise fail(problem)
    return dict(body)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


# -- what exec() accepts ---------------------------------------------------------------------------
# A program, its arguments and its environment reach execve() as C strings: a NUL byte would end
# one early, an environment name holds no "=" (it ends the name), and the text must encode to
# bytes. Checked here, with the file and the line, rather than failing in the spawn.


def exec_text_problem(text: str) -> str | None:
    """What keeps ``text`` from being a program, an argument or an environment value, or None."""
    nul = text.find("\0")
    if nul >= 0:
        return f"holds a NUL byte (at character {nul})"
    try:
        text.encode("utf-8", "surrogateescape")  # how the spawn encodes it
    except UnicodeEncodeError as exc:
        return f"is not valid text (a lone surrogate at character {exc.start})"
    return None


def env_problem(env: Mapping[str, str]) -> str | None:
    """What keeps ``env`` from being an agent's or a server's extra environment, or None."""
    for name, value in env.items():
        if not name:
            return "an environment name is empty"
        if "=" in name:
            return f"the environment name {name!r} holds '=', which would end the name"
        if problem := exec_text_problem(name):
            return f"the environment name {name!r} {problem}"
        if problem := exec_text_problem(value):
            return f"the environment variable {name} {problem}"
    return None


def _args_problem(args: Sequence[str]) -> str | None:
    for index, arg in enumerate(args):
        if problem := exec_text_problem(arg):
            return f"args[{index}] {problem}"
    return None


def argv_problem(argv: Sequence[str]) -> str | None:
    """What keeps ``argv`` (a program and its arguments) from being run, or None."""
    for arg in argv:
        if problem := exec_text_problem(arg):
            return f"the command line's {arg!r} {problem}"
    return None


def mcp_server(
    name: str, command: str, args: Sequence[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """An ACP stdio ``McpServer`` in its wire shape."""
    return {
        "name": name,
        "command": command,
        "args": list(args),
        "env": [{"name": key, "value": value} for key, value in env.items()],
    }


def merge_entry(lower: AgentEntry, upper: AgentEntry) -> AgentEntry:
    """``upper`` (a config entry) over ``lower`` (built-in or registry) of the same name: a
    command replaces the whole agent; without one, env, defaults and MCP servers merge in."""
    if upper.argv:
        return upper
    servers = {s["name"]: s for s in lower.mcp_servers} | {s["name"]: s for s in upper.mcp_servers}
    return replace(
        lower,
        source=f"{lower.source}+config",
        env={**lower.env, **upper.env},
        mcp_servers=tuple(servers.values()),
        defaults={**lower.defaults, **upper.defaults},
        description=upper.description or lower.description,
    )


# -- --mcp -----------------------------------------------------------------------------------------


def parse_mcp_option(value: str) -> dict[str, Any]:
    """``NAME=COMMAND [ARGS...]``, split like a shell line (shlex), as an ACP stdio McpServer.

    Raises ValueError with a one-line message."""
    name, sep, rest = value.partition("=")
    name = name.strip()
    if not sep or not name or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(
            f"--mcp {value!r}: give NAME=COMMAND [ARGS...], e.g. --mcp 'files=mcp-fs /tmp'"
        )
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ValueError(f"--mcp {value!r}: {exc} (quote it as a shell would)") from None
    if not words:
        raise ValueError(f"--mcp {value!r}: no command after {name}=")
    return mcp_server(name, words[0], words[1:], {})


# -- lines, for messages ---------------------------------------------------------------------------


def _decode_error_line(message: str) -> int | None:
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else None


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")


class _Locator:
    """Finds the line of a table's key in TOML text, for messages. Approximate on purpose
    (tomllib keeps no positions): the key's line within its table, else the table's header."""

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines()

    def line(self, table: list[str], key: str | None, occurrence: int = 0) -> int | None:
        current: list[str] = []
        header_line: int | None = None
        seen = 0 if not table else -1  # the top level has no header: it is seen from line 1
        for number, text in enumerate(self._lines, 1):
            header = _HEADER.match(text)
            if header:
                current = [part.strip().strip("\"'") for part in header.group(1).split(".")]
                if current == table:
                    seen += 1
                    header_line = number if seen == occurrence else header_line
                continue
            if key is None:
                continue
            in_table = current == table and seen == occurrence
            if in_table and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", text):
                return number
            # an inline table inside its parent: [agents.x] ... defaults = { grace = -1 }
            inline = len(table) > 2 and current == table[:-1]
            if inline and re.match(
                rf"^\s*{re.escape(table[-1])}\s*=.*\b{re.escape(key)}\s*=", text
            ):
                return number
        return header_line
