"""The layering rules of design.md, checked on the source: dependencies point down only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "acp_bridge"

# Each layer may import only from the layers listed (and itself).
ALLOWED = {
    "errors": set(),
    # Standard library only, at the bottom like errors: both SQLite files open through it.
    "sqlite_wal": set(),
    # Opening paths another user could have planted (issue 21): standard library and errors.
    "safe_files": {"errors"},
    # The frozen-dataclass decorator (standard library and typing_extensions): any layer.
    "record": set(),
    # The event loop's clock, as anyio.current_time() reads it (anyio only): any layer.
    "clock": set(),
    # The package's version string (standard library only): any layer.
    "version": set(),
    "wire": {"errors", "record"},
    "rpc": {"errors", "record", "wire"},
    "process": {"errors", "record", "wire", "rpc"},  # design.md: process sits above rpc
    # The one core under every front-end: lifecycle, generations, restore plan, turn machine.
    "core": {"errors", "record", "clock", "wire", "rpc", "process"},
    # Sessions and turns: the one performer of the turn machine (design.md).
    "client": {"errors", "record", "clock", "version", "wire", "rpc", "process", "core"},
    "conversation": {
        "errors", "record", "wire", "rpc", "process", "core", "client", "sqlite_wal", "safe_files",
    },
    "proxy": {"errors", "record", "clock", "wire", "rpc", "process", "core", "safe_files"},
    "pgstore": {"errors", "record", "conversation"},  # the PostgreSQL store (issue 23)
    "cli": {
        "errors",
        "record",
        "version",
        "wire",
        "rpc",
        "process",
        "core",
        "client",
        "conversation",
        "proxy",
        "agents",
        "safe_files",
        "pgstore",
        "host",
    },
    # The conversation host (issue 22): between cli/ and conversation/ + proxy/; never cli/.
    "host": {
        "errors",
        "record",
        "clock",
        "version",
        "wire",
        "rpc",
        "process",
        "core",
        "client",
        "conversation",
        "proxy",
        "safe_files",
    },
    # The built-in reference agent: a separate program on the protocol's lower layers only.
    "agents": {"errors", "record", "version", "wire", "rpc", "sqlite_wal", "safe_files"},
}
PURE_MODULES = [
    "wire",
    "rpc/pending.py",
    "rpc/splitter.py",
    "process/spec.py",
    "process/policy.py",
    "client/toolcalls.py",
    "core/lifecycle.py",
    "core/turn_machine.py",
    "conversation/queue.py",
    "conversation/queue_views.py",
    "conversation/queue_model.py",
    "conversation/queue_states.py",
    "conversation/reconcile.py",
    "agents/mock_script.py",
    "proxy/frames.py",
    "proxy/routing.py",
    "proxy/turns.py",
    "proxy/registry.py",
    "proxy/answers.py",
    "proxy/redact.py",
    "proxy/recording.py",
    "proxy/script.py",
    "agents/tools.py",
    "host/log_view.py",
    "host/ws_protocol.py",
]
IMPURE_IMPORTS = {"anyio", "trio", "asyncio", "os", "signal", "time", "subprocess", "socket"}


def _layer(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _sources(sub: str = "") -> list[Path]:
    root = PACKAGE / sub
    return [root] if root.is_file() else sorted(root.rglob("*.py"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_layers(path: Path) -> None:
    layer = _layer(path)
    if layer not in ALLOWED:
        return
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] != "acp_bridge" or len(parts) < 2 or parts[1] in ("__init__",):
            continue
        target = parts[1]
        assert target == layer or target in ALLOWED[layer], f"{path.name} imports {name}"


@pytest.mark.parametrize(
    "path",
    [p for sub in PURE_MODULES for p in _sources(sub)],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_pure_modules_do_no_io(path: Path) -> None:
    impure = {name for name in _imports(path) if name.split(".")[0] in IMPURE_IMPORTS}
    assert not impure, f"{path.name} imports {sorted(impure)}"


def test_only_the_cli_touches_stdout_stdin_and_argv() -> None:
    for path in _sources():
        if _layer(path) == "cli" or path.name == "__main__.py":
            continue
        text = path.read_text()
        for forbidden in ("sys.stdout", "sys.stdin", "sys.argv", "print("):
            assert forbidden not in text, f"{path.relative_to(PACKAGE)} uses {forbidden}"


def test_importing_the_package_loads_neither_litellm_nor_the_sdk_nor_jsonrpcserver() -> None:
    code = (
        "import sys, acp_bridge, acp_bridge.cli.main, acp_bridge.rpc.peer, "
        "acp_bridge.wire.updates, acp_bridge.process.launcher\n"
        "bad = [m for m in ('litellm', 'acp', 'jsonrpcserver') if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
