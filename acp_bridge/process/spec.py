"""What to run: an agent's command line, working directory and environment. Pure data."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path

from acp_bridge.record import record

__all__ = ["AgentSpec", "default_name"]

_LAUNCHERS = ("python", "node", "npx", "uvx", "bunx", "deno", "bun", "env", "pipx")


@record(slots=False)
class AgentSpec:
    """How to start one agent.

    The agent inherits the bridge's environment unless told otherwise:

    * ``env`` adds or overrides variables;
    * ``env_remove`` drops variables (secrets the agent must not see);
    * ``env_allowlist``, when set, keeps only the named variables before ``env`` is applied.
    """

    argv: Sequence[str]
    name: str = ""
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    env_remove: frozenset[str] = frozenset()
    env_allowlist: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("an agent needs a command to run")
        if not self.name:
            object.__setattr__(self, "name", default_name(self.argv))

    @property
    def display_command(self) -> str:
        return shlex.join(self.argv)

    @property
    def changes_env(self) -> bool:
        return bool(self.env or self.env_remove or self.env_allowlist is not None)

    def resolve_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's environment, built from ``base`` (normally the bridge's own)."""
        if self.env_allowlist is not None:
            resolved = {k: v for k, v in base.items() if k in self.env_allowlist}
        else:
            resolved = dict(base)
        for key in self.env_remove:
            resolved.pop(key, None)
        resolved.update(self.env)
        return resolved


def default_name(argv: Sequence[str]) -> str:
    """A readable agent name from its command line, for logs and error messages.

    Launchers are looked through: ``python -u fixtures/agents/echo_agent.py`` is
    ``echo_agent``, ``npx @zed-industries/claude-code-acp`` is ``claude-code-acp``,
    ``python -m my_agent`` is ``my_agent``.
    """
    words = list(argv)
    name = Path(words[0]).name
    if name.startswith(_LAUNCHERS) or name in ("pnpm", "yarn"):
        rest = words[1:]
        for index, word in enumerate(rest):
            if word in ("-m", "-c") and index + 1 < len(rest):
                return rest[index + 1] if word == "-m" else name
            if word in ("dlx", "exec", "run", "x"):
                continue
            if not word.startswith("-") and "=" not in word:
                name = word
                break
    base = name.rsplit("/", 1)[-1].split("@", 1)[0]  # a package's @version goes
    for suffix in (".py", ".js", ".mjs", ".ts"):
        base = base.removesuffix(suffix)
    return base or name
