"""What a one-shot ``acp-bridge run -m hello -- AGENT`` pays for (issue #8: at most 1.1x the
wall time of a TypeScript-SDK client doing the same).

A real run against the echo agent, in a fresh interpreter, then a look at what it loaded and
built: the wire models it validated (initialize, session/new and the prompt's answer) and
nothing for requests the agent never sent (permission, fs, terminal), nor the typed form of
the updates nobody asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ECHO = ROOT / "fixtures" / "agents" / "echo_agent.py"

PROGRAM = """
import gc, json, sys
import importlib.metadata

scans = []  # pydantic's plugin discovery walks every installed distribution
walk = importlib.metadata.distributions
importlib.metadata.distributions = lambda *a, **k: (scans.append(1), walk(*a, **k))[1]

from acp_bridge.cli.main import main

code = main(["run", "--store", sys.argv[1], "-m", "hello", "--", sys.executable, sys.argv[2],
             "--quiet"])
from acp_bridge.wire.base import WireModel

def models():
    seen, todo = set(), [WireModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return seen

print(json.dumps({
    "code": code,
    "built": sorted(m.__name__ for m in models() if m.__pydantic_complete__),
    "modules": sorted(m for m in sys.modules if m.startswith("acp_bridge.")),
    "frozen": gc.get_freeze_count(),
    "gc_enabled": gc.isenabled(),
    "plugin_scans": len(scans),
}))
"""

# What the run validates: initialize's answer (with the defaults it fills in), session/new's,
# and the prompt's.
EXPECTED_BUILT = {
    "InitializeResponse",
    "AgentCapabilities",
    "AgentAuthCapabilities",
    "PromptCapabilities",
    "McpCapabilities",
    "SessionCapabilities",
    "Implementation",
    "NewSessionResponse",
    "PromptResponse",
    "ClientCapabilities",
    "FileSystemCapabilities",
    "AuthCapabilities",
    "InitializeRequest",
}


def test_a_one_shot_run_builds_only_the_models_it_validates(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path / "store.db"), str(ECHO)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "hello" in result.stdout
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["code"] == 0
    built = set(report["built"])
    assert {"InitializeResponse", "NewSessionResponse", "PromptResponse"} <= built
    assert built <= EXPECTED_BUILT, built - EXPECTED_BUILT
    # The agent sent no request and nobody read a typed update: those modules stay unloaded,
    # and so do fs and terminal support, which the run did not offer.
    for module in ("wire.client_methods", "wire.updates", "wire.session_requests"):
        assert f"acp_bridge.{module}" not in report["modules"]
    for module in ("client.fs", "client.terminal"):
        assert f"acp_bridge.{module}" not in report["modules"]
    # The library was imported with the collector paused, and frozen after (see run_entry).
    assert report["frozen"] > 10_000
    assert report["gc_enabled"] is True
    # No pydantic plugin discovery (a scan of every installed package's metadata): the cache
    # was settled empty before the first model was built.
    assert report["plugin_scans"] == 0
