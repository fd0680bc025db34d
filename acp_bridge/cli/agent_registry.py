"""The ACP registry's ``registry.json`` as named agents. Pure: text in, entries out (the
caller passes ``which`` to look a program up on PATH). Nothing is ever downloaded.

The format (https://agentclientprotocol.com/get-started/registry, the registry repository's
FORMAT.md)::

    {"version": "1.0.0", "agents": [{"id": "...", "name": "...", "description": "...",
      "distribution": {"npx": {"package": "@scope/pkg", "args": [...], "env": {...}},
                       "uvx": {"package": "pkg", "args": [...]},
                       "binary": {"linux-x86_64": {"archive": "https://...", "cmd": "./agent",
                                                   "args": [...]}}}}]}
"""

from __future__ import annotations

import json
import re
from typing import Any

from acp_bridge.cli.agent_config import (
    TOO_DEEP,
    AgentEntry,
    ConfigError,
    Which,
    argv_problem,
    env_problem,
)

__all__ = ["parse_registry"]


def parse_registry(text: str, path: str, platform_key: str, which: Which) -> dict[str, AgentEntry]:
    """The agents of a registry.json (``{"version", "agents": [{"id", "name", "description",
    "distribution": {"npx"|"uvx"|"binary"}}]}``). Nothing is downloaded: an ``npx`` or ``uvx``
    distribution runs through that launcher, a ``binary`` one runs its ``cmd`` by file name from
    PATH (install it first). The first distribution whose program is on PATH wins (binary, npx,
    uvx); when none is, the first listed of npx, uvx, binary."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            path, exc.lineno, f"not valid JSON ({exc.msg})", "fix the syntax there"
        ) from None
    except RecursionError:  # json parses nested arrays and objects recursively
        raise ConfigError(path, None, TOO_DEEP, "is it the right file?") from None
    agents = data.get("agents") if isinstance(data, dict) else None
    if not isinstance(agents, list):
        raise ConfigError(
            path, 1, 'no "agents" array', "give a registry.json of the ACP registry's format"
        )
    entries: dict[str, AgentEntry] = {}
    for index, agent in enumerate(agents):
        entry = _registry_agent(agent, path, _json_line(text, agent), platform_key, which, index)
        entries[entry.name] = entry
    return entries


def _registry_agent(
    agent: Any, path: str, line: int | None, platform_key: str, which: Which, index: int
) -> AgentEntry:
    if not isinstance(agent, dict) or not isinstance(agent.get("id"), str) or not agent["id"]:
        raise ConfigError(path, line, f'agents[{index}] has no "id"', "give each agent an id")
    agent_id = agent["id"]
    dist = agent.get("distribution")
    if not isinstance(dist, dict):
        raise ConfigError(
            path, line, f"agent {agent_id!r} has no distribution", 'give "npx", "uvx" or "binary"'
        )
    choices: list[tuple[str, list[str], dict[str, str]]] = []
    binary = dist.get("binary")
    target = binary.get(platform_key) if isinstance(binary, dict) else None
    if isinstance(target, dict) and isinstance(target.get("cmd"), str):
        program = target["cmd"].replace("\\", "/").rsplit("/", 1)[-1]
        choices.append(
            ("binary", [program, *_str_list(target.get("args"))], _str_map(target.get("env")))
        )
    for launcher, prefix in (("npx", ["npx", "-y"]), ("uvx", ["uvx"])):
        spec = dist.get(launcher)
        if isinstance(spec, dict) and isinstance(spec.get("package"), str):
            argv = [*prefix, spec["package"], *_str_list(spec.get("args"))]
            choices.append((launcher, argv, _str_map(spec.get("env"))))
    if not choices:
        raise ConfigError(
            path,
            line,
            f"agent {agent_id!r} has no npx, uvx or {platform_key} binary distribution",
            "it can't run here; remove it or add a distribution",
        )
    found = [c for c in choices if which(c[1][0])]
    kind, argv, env = found[0] if found else sorted(choices, key=lambda c: c[0] == "binary")[0]
    problem = argv_problem(argv) or env_problem(env)
    if problem:
        raise ConfigError(path, line, f"agent {agent_id!r} ({kind}): {problem}", "fix the value")
    description = agent.get("description") if isinstance(agent.get("description"), str) else ""
    return AgentEntry(
        agent_id,
        "registry",
        tuple(argv),
        env,
        description=f"{description} ({kind})".strip(),
        origin=f"{path}:{line or 1}",
    )


def _str_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _json_line(text: str, agent: Any) -> int | None:
    """The line of this agent's ``"id"`` in the registry text (for messages)."""
    if not isinstance(agent, dict) or not isinstance(agent.get("id"), str):
        return None
    match = re.search(r'"id"\s*:\s*' + re.escape(json.dumps(agent["id"])), text)
    return text.count("\n", 0, match.start()) + 1 if match else None
