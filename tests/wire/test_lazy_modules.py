"""The request-side models live in modules a client run does not load, and every public name
is still importable from where it always was."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from acp_bridge.wire import acp, client_methods, kinds, session_requests, updates

ROOT = Path(__file__).resolve().parents[2]


def test_acp_re_exports_exactly_the_session_requests() -> None:
    assert set(session_requests.__all__) == acp._REQUESTS
    assert set(acp.__all__) >= acp._REQUESTS


@pytest.mark.parametrize("module", ["acp", "updates", "client_methods"])
def test_every_public_name_resolves(module: str) -> None:
    loaded = importlib.import_module(f"acp_bridge.wire.{module}")
    for name in loaded.__all__:
        assert getattr(loaded, name) is not None, name


def test_moved_names_are_the_same_objects() -> None:
    assert acp.NewSessionRequest is session_requests.NewSessionRequest
    assert acp.McpServerStdio is session_requests.McpServerStdio
    assert client_methods.EnvVariable is session_requests.EnvVariable
    assert updates.ToolKind is kinds.ToolKind
    assert client_methods.PermissionOptionKind is kinds.PermissionOptionKind


def test_dir_lists_the_re_exported_names() -> None:
    assert set(dir(acp)) >= set(acp.__all__)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchModel'"):
        _ = acp.NoSuchModel


def test_the_one_shot_path_loads_no_request_side_module() -> None:
    program = (
        "import sys, acp_bridge.cli.run\n"
        "print(sorted(m for m in sys.modules if m.startswith('acp_bridge.wire.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    loaded = result.stdout
    for module in ("session_requests", "content", "updates", "client_methods", "methods"):
        assert f"acp_bridge.wire.{module}'" not in loaded
