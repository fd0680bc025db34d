"""The wire models are defined at import but built on first use (issue #8, a one-shot's fixed cost).

Importing the one-shot path (``acp_bridge.cli.run``) must build no model and no module-level
``TypeAdapter``; the first validation builds the model it needs (and nothing it does not), and
from then on the validator is the real one, with no per-call detour.
Each check runs in a fresh interpreter: another test having used a model would hide a build.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Every WireModel subclass that exists in the process, by name, with its build state.
_PROBE = """
import json, sys
from acp_bridge.wire.base import WireModel

def models():
    seen, todo = set(), [WireModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return seen

def report(**extra):
    built = sorted(m.__name__ for m in models() if m.__pydantic_complete__)
    print(json.dumps({"built": built, "defined": len(models()), **extra}))
"""


def _probe(body: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE + body],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return report


def test_importing_the_one_shot_path_builds_no_model() -> None:
    report = _probe(
        "import acp_bridge.cli.run\n"
        "from acp_bridge.wire import content, updates\n"
        "report(adapters=[updates.SESSION_UPDATE_ADAPTER.pydantic_complete,"
        " content.CONTENT_BLOCK_ADAPTER.pydantic_complete])\n"
    )
    assert report["built"] == []
    assert report["adapters"] == [False, False]


def test_importing_every_model_module_builds_no_model() -> None:
    report = _probe(
        "import acp_bridge.wire.methods\n"  # imports every model module
        "report()\n"
    )
    assert report["defined"] > 80
    assert report["built"] == []


def test_first_use_builds_only_what_it_validates() -> None:
    report = _probe(
        "from acp_bridge.wire.methods import RESULTS\n"
        "from acp_bridge.wire.initialize import InitializeResponse\n"
        "InitializeResponse.parse({'protocolVersion': 1, 'agentCapabilities': {}})\n"
        "report()\n"
    )
    built = report["built"]
    assert isinstance(built, list)
    assert "InitializeResponse" in built
    # the agent → client request models: only built when an agent sends such a request
    for name in (
        "RequestPermissionRequest",
        "ReadTextFileRequest",
        "WriteTextFileRequest",
        "CreateTerminalRequest",
        "TerminalOutputResponse",
        "SessionNotification",
        "PromptRequest",
    ):
        assert name not in built


@pytest.mark.parametrize(
    "build",
    [
        "from acp_bridge.wire.acp import PromptResponse as M\n"
        "M.parse({'stopReason': 'end_turn'})\n"
        "validator = M.__pydantic_validator__\n",
        "from acp_bridge.wire.updates import SESSION_UPDATE_ADAPTER as A\n"
        "A.validate_python({'sessionUpdate': 'plan', 'entries': []}, by_alias=True,"
        " by_name=False)\n"
        "validator = A.validator\n",
        "from acp_bridge.wire.content import CONTENT_BLOCK_ADAPTER as A\n"
        "A.validate_python({'type': 'text', 'text': 'hi'})\n"
        "validator = A.validator\n",
    ],
    ids=["model", "session-update-adapter", "content-block-adapter"],
)
def test_after_first_use_the_validator_is_the_built_one(build: str) -> None:
    """No per-call cost: the placeholder is gone once built (session/update is the hot path)."""
    report = _probe(build + "report(validator=type(validator).__name__)\n")
    assert report["validator"] in ("SchemaValidator", "PluggableSchemaValidator")


def test_deferred_models_still_validate_and_dump() -> None:
    """Building on first use changes nothing a caller sees, construction and dumps included."""
    report = _probe(
        "from acp_bridge.wire.client_methods import RequestPermissionResponse\n"
        "from acp_bridge.wire.updates import SessionNotification, ToolKind\n"
        "from acp_bridge.wire.kinds import ToolKind as K\n"
        "n = SessionNotification.parse({'sessionId': 's', 'update': {'sessionUpdate': 'tool_call',"
        " 'toolCallId': 't', 'title': 'x', 'kind': 'read', 'content': [{'type': 'content',"
        " 'content': {'type': 'text', 'text': 'hi'}}]}})\n"
        "report(kind=n.update.kind is K.READ and ToolKind is K,"
        " dump=RequestPermissionResponse.cancelled().dump_json().decode())\n"
    )
    assert report["kind"] is True
    assert report["dump"] == '{"outcome":{"outcome":"cancelled"}}'
