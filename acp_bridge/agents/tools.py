"""The model's tools, and which of them a session may offer. Pure.

Every tool works through the client: files through ``fs/*``, commands through ``terminal/*``.
A tool is offered only when the client advertised what it needs, and only in a mode that
allows it (``ask`` is read-only; ``code`` has everything).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from acp_bridge.wire.initialize import ClientCapabilities

__all__ = ["MODES", "TOOLS", "ToolSpec", "available_tools", "mode_state"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    kind: str
    """The ACP ToolKind shown to the client."""
    writes: bool
    """Changes something (asks permission first; not offered in ``ask`` mode)."""
    needs: str
    """The client capability: ``read``, ``write`` or ``terminal``."""

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_PATH: Final = {"type": "string", "description": "file path, relative to the project root"}

TOOLS: Final = (
    ToolSpec(
        "read_file",
        "Read a text file of the project.",
        _object(
            {
                "path": _PATH,
                "line": {"type": "integer", "description": "first line (1-based), optional"},
                "limit": {"type": "integer", "description": "how many lines, optional"},
            },
            ["path"],
        ),
        kind="read",
        writes=False,
        needs="read",
    ),
    ToolSpec(
        "list_dir",
        "List the entries of a directory of the project.",
        _object({"path": {**_PATH, "description": "directory, relative to the root"}}, ["path"]),
        kind="search",
        writes=False,
        needs="terminal",
    ),
    ToolSpec(
        "write_file",
        "Create or replace a text file of the project with the given content.",
        _object({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
        kind="edit",
        writes=True,
        needs="write",
    ),
    ToolSpec(
        "run",
        "Run a shell command in the project root and return its output and exit status.",
        _object({"command": {"type": "string", "description": "a sh command line"}}, ["command"]),
        kind="execute",
        writes=True,
        needs="terminal",
    ),
)

MODES: Final = {
    "ask": ("Ask", "Read-only: the agent may read files and list directories."),
    "code": ("Code", "The agent may also write files and run commands (it asks first)."),
}


def _client_has(capabilities: ClientCapabilities, need: str) -> bool:
    if need == "read":
        return capabilities.fs.read_text_file
    if need == "write":
        return capabilities.fs.write_text_file
    return capabilities.terminal


def available_tools(capabilities: ClientCapabilities, mode: str) -> list[ToolSpec]:
    return [
        tool
        for tool in TOOLS
        if _client_has(capabilities, tool.needs) and (mode == "code" or not tool.writes)
    ]


def mode_state(current: str) -> dict[str, Any]:
    """``modes`` of a session response."""
    return {
        "currentModeId": current,
        "availableModes": [
            {"id": mode_id, "name": name, "description": description}
            for mode_id, (name, description) in MODES.items()
        ],
    }
