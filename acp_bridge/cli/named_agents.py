"""Named agents and MCP servers for every subcommand that starts an agent.

The interface, for subcommands (``run``, ``chat``, ``proxy``, ...):

* ``add_agent_options(parser)`` in the subcommand's registrar adds

  - ``--agent NAME``: a named agent (built-in, from the config file, or from a registry file)
    instead of ``-- CMD``;
  - ``--config PATH``: the config file (default: ``$ACP_BRIDGE_CONFIG``, else
    ``$XDG_CONFIG_HOME/acp-bridge/config.toml``, ``~/.config/acp-bridge/config.toml``; on macOS
    ``~/Library/Application Support/acp-bridge/config.toml``). A missing default file is fine;
    a missing or broken named one is an error, even with ``-- CMD`` (which takes nothing from
    it). ``$XDG_CONFIG_HOME`` counts only when absolute (XDG rules); an empty or relative
    ``$HOME`` is refused when the default is needed;
  - ``--registry FILE``: a ``registry.json`` of the ACP registry's format (overrides the
    config's ``registry = "FILE"``); read, never fetched; checked with ``-- CMD`` too;
  - ``--mcp NAME=COMMAND [ARGS...]`` (repeatable): a stdio MCP server for the session. The value
    is ONE argument, split like a shell line (``shlex``): ``--mcp 'files=mcp-fs --root "/my dir"'``.
    A ``--mcp`` server replaces the named agent's server of the same name.

  The parser must also have the ``agent_cmd`` REMAINDER positional (``-- CMD [ARGS...]``).
  Light: nothing heavy is imported until an agent is resolved (``--help`` budget).

* ``resolve_agent(parser, args, argv, required=True) -> ResolvedAgent`` in the handler. Exactly
  one of ``--agent NAME`` or ``-- CMD`` (else a usage error: one line, exit 2; with
  ``required=False`` neither is allowed too, e.g. ``run --resume``, and ``argv`` comes back
  empty). ``argv`` is the process's command line (``sys.argv[1:]``): the named agent's
  ``defaults`` are applied to ``args`` for every option of ``args.command``'s subparser that
  it does not name before ``--`` (abbreviations included). A config or registry error names the
  file, the line and the fix (one line on stderr, exit 2).

Precedence of names: config file over registry file over built-ins. A config entry with a
``command`` replaces an agent of the same name; one without adjusts it (env, defaults and MCP
servers merge in). See :mod:`.agent_config` for the file format, and docs/agents.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from acp_bridge.cli.options import UnusableHomeError, home_dir, xdg_base_dir
from acp_bridge.record import record

if TYPE_CHECKING:
    from acp_bridge.cli.agent_config import AgentEntry

__all__ = [
    "Catalog",
    "ResolvedAgent",
    "add_agent_options",
    "default_config_path",
    "load_catalog",
    "resolve_agent",
]


@record(slots=False)
class ResolvedAgent:
    """The agent to start: its command line, its extra environment, the MCP servers for its
    sessions (ACP stdio ``McpServer`` wire shape: ``{name, command, args, env: [{name,
    value}]}``), and the default options its config gave (already applied to ``args``)."""

    name: str | None
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)
    source: str = "command"  # "command" (-- CMD), "builtin", "registry", "config", ...


@record(slots=False)
class Catalog:
    """Every named agent, merged; and which files they came from."""

    agents: dict[str, AgentEntry]
    config_path: str | None  # the config file read, or None when there was none
    registry_path: str | None


def add_agent_options(parser: argparse.ArgumentParser, *, mcp: bool = True) -> None:
    """Add ``--agent``, ``--config``, ``--registry`` and ``--mcp`` (see the module docstring).
    ``mcp=False`` leaves ``--mcp`` out (the proxy: the editor chooses each session's servers)."""
    parser.add_argument(
        "--agent",
        metavar="NAME",
        help="a named agent instead of -- CMD (built-in, config or registry: acp-bridge agents)",
    )
    add_config_options(parser)
    if not mcp:
        parser.set_defaults(mcp=[])
        return
    parser.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME=COMMAND [ARGS...]",
        help="a stdio MCP server for the session, as one shell-quoted argument, e.g. "
        "--mcp 'files=mcp-fs /tmp' (repeatable)",
    )


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and ``--registry`` only (e.g. for ``acp-bridge agents``)."""
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="the named agents' TOML config (default: $ACP_BRIDGE_CONFIG, else "
        "$XDG_CONFIG_HOME/acp-bridge/config.toml)",
    )
    parser.add_argument(
        "--registry",
        metavar="FILE",
        help="a registry.json of the ACP registry's format to take agents from (never fetched)",
    )


def resolve_agent(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    argv: list[str],
    *,
    required: bool = True,
) -> ResolvedAgent:
    """The agent ``args`` names (see the module docstring). Exits 2 on a usage or config error."""
    from acp_bridge.cli.agent_config import ConfigError, parse_mcp_option

    command = list(getattr(args, "agent_cmd", None) or [])
    if command[:1] == ["--"]:
        command = command[1:]
    name = getattr(args, "agent", None)
    if name and command:
        parser.error("give either --agent NAME or -- CMD, not both")
    if required and not name and not command:
        parser.error(
            "give the agent command after -- (e.g. -- my-agent --acp) or a named agent with "
            "--agent NAME (see acp-bridge agents)"
        )
    extra: dict[str, dict[str, Any]] = {}
    for value in getattr(args, "mcp", None) or []:
        try:
            server = parse_mcp_option(value)
        except ValueError as exc:
            parser.error(str(exc))
        if server["name"] in extra:
            parser.error(f"--mcp: two servers are named {server['name']!r}")
        extra[server["name"]] = server
    if not name:
        if args.config or args.registry or os.environ.get("ACP_BRIDGE_CONFIG"):
            # Named, so wanted: a missing or broken file is an error even though -- CMD (or
            # the stored conversation's agent) needs nothing from it.
            try:
                load_catalog(args.config, args.registry)
            except ConfigError as exc:
                _config_error(parser, exc)
        return ResolvedAgent(None, command, mcp_servers=list(extra.values()))
    try:
        catalog = load_catalog(args.config, args.registry)
    except ConfigError as exc:
        _config_error(parser, exc)
    entry = catalog.agents.get(name)
    if entry is None:
        where = catalog.config_path or str(default_config_path())
        known = ", ".join(sorted(catalog.agents)) or "none"
        parser.error(
            f"no agent named {name!r} (known: {known}); define [agents.{name}] in {where}, "
            "or give -- CMD"
        )
    if not entry.argv:
        parser.error(f"[agents.{name}] in {catalog.config_path} has no command; add command = ...")
    servers = {s["name"]: s for s in entry.mcp_servers} | extra
    defaults = dict(entry.defaults)
    _apply_defaults(parser, args, argv, defaults)
    return ResolvedAgent(
        name, list(entry.argv), dict(entry.env), list(servers.values()), defaults, entry.source
    )


def load_catalog(config: str | None = None, registry: str | None = None) -> Catalog:
    """Built-ins, then the registry file's agents, then the config file's, merged by name.
    Raises :class:`~acp_bridge.cli.agent_config.ConfigError`."""
    from acp_bridge.cli.agent_config import (
        ConfigError,
        merge_entry,
        parse_config,
    )
    from acp_bridge.cli.agent_registry import parse_registry
    from acp_bridge.cli.builtin_agents import BUILTIN_AGENTS

    config_path, must_exist = _config_location(config)
    parsed = None
    if config_path.is_file() or must_exist:
        parsed = parse_config(_read(config_path, "config file"), str(config_path))
    registry_path: Path | None = None
    if registry:
        registry_path = Path(registry).expanduser()
    elif parsed is not None and parsed.registry:
        registry_path = config_path.parent / Path(parsed.registry).expanduser()
    agents = {entry.name: entry for entry in BUILTIN_AGENTS}
    if registry_path is not None:
        try:
            text = _read(registry_path, "registry file")
        except ConfigError as exc:
            if registry or parsed is None:
                raise
            line = _registry_line(config_path)
            raise ConfigError(str(config_path), line, str(exc), "fix registry = ...") from None
        agents |= parse_registry(text, str(registry_path), platform_key(), shutil.which)
    for name, entry in (parsed.agents if parsed else {}).items():
        lower = agents.get(name)
        if lower is None and not entry.argv:
            raise ConfigError(
                str(config_path),
                int(entry.origin.rsplit(":", 1)[1]),
                f"[agents.{name}] has no command, and no built-in or registry agent has that name",
                "add command = ...",
            )
        agents[name] = merge_entry(lower, entry) if lower is not None else entry
    return Catalog(
        agents=agents,
        config_path=str(config_path) if parsed is not None else None,
        registry_path=str(registry_path) if registry_path is not None else None,
    )


def default_config_path() -> Path:
    """The platform's user config file for acp-bridge (which may not exist).

    Raises UnusableHomeError when it would be under an unusable ``$HOME``."""
    try:
        if sys.platform == "darwin":
            base = home_dir() / "Library" / "Application Support"
        elif sys.platform == "win32" and os.environ.get("APPDATA"):
            base = Path(os.environ["APPDATA"])
        else:
            base = xdg_base_dir("XDG_CONFIG_HOME", ".config")
    except UnusableHomeError as exc:
        raise UnusableHomeError(f"{exc}, or give --config PATH") from None
    return base / "acp-bridge" / "config.toml"


def platform_key() -> str:
    """This machine in the registry's binary keys: ``linux-x86_64``, ``darwin-aarch64``, ..."""
    import platform

    system = {"darwin": "darwin", "win32": "windows"}.get(sys.platform, sys.platform)
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return f"{system}-{arch}"


def _config_location(explicit: str | None) -> tuple[Path, bool]:
    """The config file to read, and whether it must exist (it was named)."""
    if explicit:
        return Path(explicit).expanduser(), True
    if os.environ.get("ACP_BRIDGE_CONFIG"):
        return Path(os.environ["ACP_BRIDGE_CONFIG"]).expanduser(), True
    return default_config_path(), False


def _read(path: Path, what: str) -> str:
    """The file's text, at most MAX_CONFIG_BYTES (a larger file is refused, not truncated). Only
    a regular file is read: a FIFO or a device is refused without being opened blocking."""
    from acp_bridge.cli.agent_config import MAX_CONFIG_BYTES, ConfigError
    from acp_bridge.errors import UnsafeFileError
    from acp_bridge.safe_files import read_regular

    try:
        data = read_regular(str(path), MAX_CONFIG_BYTES)
    except UnsafeFileError as exc:
        raise ConfigError(
            str(path), None, f"the {what} {exc.reason.removeprefix('it ')}", "give a regular file"
        ) from None
    except OSError as exc:
        raise ConfigError(
            str(path), None, f"cannot read the {what} ({exc.strerror})", "check the path"
        ) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            str(path), None, f"the {what} is larger than 1 MiB", "is it the right file?"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(str(path), line, f"the {what} is not UTF-8", "save it as UTF-8") from None


def _registry_line(config_path: Path) -> int | None:
    from acp_bridge.cli.agent_config import ConfigError

    try:
        lines = _read(config_path, "config file").splitlines()
    except ConfigError:
        return None
    return next(
        (n for n, text in enumerate(lines, 1) if text.lstrip().startswith("registry")), None
    )


def _config_error(parser: argparse.ArgumentParser, exc: Exception) -> NoReturn:
    parser.exit(2, f"{parser.prog}: error: {exc}\n")


def _apply_defaults(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    argv: list[str],
    defaults: dict[str, Any],
) -> None:
    """Set each default on ``args`` unless its option was given on the command line."""
    sub = _subparser(parser, getattr(args, "command", None)) or parser
    given = _given_options(argv)
    for action in sub._actions:
        if action.dest not in defaults or not action.option_strings:
            continue
        if any(_named(option, given) for option in action.option_strings):
            continue
        value = defaults[action.dest]
        if action.type is not None and callable(action.type) and not isinstance(value, bool):
            try:
                value = action.type(str(value))
            except (argparse.ArgumentTypeError, ValueError) as exc:
                parser.error(f"the named agent's default {action.dest}: {exc}")
        setattr(args, action.dest, value)


def _subparser(
    parser: argparse.ArgumentParser, command: str | None
) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            chosen: argparse.ArgumentParser = action.choices[command]
            return chosen
    return None


def _given_options(argv: list[str]) -> list[str]:
    """The option names written before ``--`` (``--grace=3`` counts as ``--grace``)."""
    names: list[str] = []
    for token in argv:
        if token == "--":
            break
        if token.startswith("-") and len(token) > 1:
            names.append(token.split("=", 1)[0])
    return names


def _named(option: str, given: list[str]) -> bool:
    """Whether ``option`` was given, whole or abbreviated as argparse allows (``--gra``)."""
    return any(
        name == option or (name.startswith("--") and len(name) > 2 and option.startswith(name))
        for name in given
    )
