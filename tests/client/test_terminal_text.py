"""``terminal/create`` text that cannot reach ``execve``: refused with -32602, nothing spawned.

Regressions for issue 7, defect 12: JSON ``"\\ud800"`` decodes to a lone surrogate, which has no
UTF-8 encoding; the spawn raised UnicodeEncodeError (a ValueError), answered -32603 with a
logged traceback. Worse, ``"\\udc80"`` went through surrogateescape as a raw 0x80 byte. A NUL
byte and an env name holding ``=`` raised ValueError the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.client.terminal import TerminalManager
from acp_bridge.errors import ErrorCode, RpcError
from tests.client.test_terminal import running

pytestmark = pytest.mark.anyio


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    return tmp_path.resolve()


def fill(value: Any, bad: str) -> Any:
    """``value`` with each ``{}`` in its strings replaced by ``bad``."""
    if isinstance(value, str):
        return value.replace("{}", bad)
    if isinstance(value, list):
        return [fill(item, bad) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, bad) for key, item in value.items()}
    return value


async def refused(manager: TerminalManager, params: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(RpcError) as info:
        await manager.create({"sessionId": "s1", **params})
    assert info.value.code == ErrorCode.INVALID_PARAMS, info.value
    assert manager.pids() == {}
    data: dict[str, Any] = info.value.data
    return data


@pytest.mark.parametrize("bad", ["\ud800", "\udc80", "x\udfffy"])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"command": "echo {}"}, "command"),
        ({"command": "echo", "args": ["ok", "{}"]}, "args[1]"),
        ({"command": "env", "env": [{"name": "A{}", "value": "1"}]}, "env[0].name"),
        ({"command": "env", "env": [{"name": "A", "value": "{}"}]}, "env[0].value"),
        ({"command": "true", "cwd": "/tmp/{}"}, "cwd"),
    ],
)
async def test_a_lone_surrogate_is_invalid_params_naming_the_field(
    cwd: Path, params: dict[str, Any], field: str, bad: str
) -> None:
    async with running(cwd) as manager:
        data = await refused(manager, fill(params, bad))
        assert data == {"field": field, "reason": "not_utf8"}


async def test_a_lone_surrogate_straight_from_the_wire_is_refused(cwd: Path) -> None:
    params = json.loads('{"command": "printf", "args": ["%s", "\\ud83d"]}')
    assert params["args"][1] == "\ud83d"  # half of an emoji, as a careless agent sends it
    async with running(cwd) as manager:
        assert await refused(manager, params) == {"field": "args[1]", "reason": "not_utf8"}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"command": "echo a\0b"}, "command"),
        ({"command": "echo", "args": ["a\0b"]}, "args[0]"),
        ({"command": "env", "env": [{"name": "A\0", "value": "1"}]}, "env[0].name"),
        ({"command": "env", "env": [{"name": "A", "value": "\0"}]}, "env[0].value"),
        ({"command": "true", "cwd": "/tmp/\0"}, "cwd"),
    ],
)
async def test_a_nul_byte_is_invalid_params_naming_the_field(
    cwd: Path, params: dict[str, Any], field: str
) -> None:
    async with running(cwd) as manager:
        assert await refused(manager, params) == {"field": field, "reason": "nul_byte"}


@pytest.mark.parametrize("name", ["", "A=B", "="])
async def test_an_env_name_that_is_empty_or_holds_equals_is_refused(cwd: Path, name: str) -> None:
    async with running(cwd) as manager:
        params = {"command": "env", "env": [{"name": name, "value": "1"}]}
        assert await refused(manager, params) == {"field": "env[0].name", "reason": "bad_env_name"}


async def test_valid_non_ascii_text_still_runs(cwd: Path) -> None:
    async with running(cwd) as manager:
        terminals = manager.for_generation(1)
        env = [{"name": "GREETING", "value": "😀"}]
        script = 'printf "%s %s" "$GREETING" "$0"'
        result = await terminals.create(
            {"sessionId": "s1", "command": "sh", "args": ["-c", script, "€"], "env": env}
        )
        params = {"sessionId": "s1", "terminalId": result["terminalId"]}
        assert await terminals.wait_for_exit(params) == {"exitCode": 0, "signal": None}
        assert (await terminals.output(params))["output"] == "😀 €"
