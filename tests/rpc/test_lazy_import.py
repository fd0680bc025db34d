"""jsonrpcserver (and jsonschema under it, ~0.3 s of imports) is loaded by the first request an
agent sends us, not before: a one-shot turn whose agent never asks the client anything, the
common ``acp-bridge run -m hello``, never pays for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ECHO = ROOT / "fixtures" / "agents" / "echo_agent.py"

PROGRAM = """
import sys
from pathlib import Path
import anyio
from acp_bridge.client.options import ClientOptions
from acp_bridge.client.supervisor import open_supervised_agent
from acp_bridge.process.spec import AgentSpec

async def main(words):
    spec = AgentSpec([sys.executable, {echo!r}, "--prompt-words"], cwd=Path.cwd())
    async with open_supervised_agent(spec, ClientOptions()) as agent:
        session = await agent.new_session(Path.cwd())
        await session.run(words)
        print("jsonrpcserver" in sys.modules, "jsonschema" in sys.modules)

anyio.run(main, sys.argv[1])
"""


def loaded_after(prompt: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(echo=str(ECHO)), prompt],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_turn_without_agent_requests_never_imports_jsonrpcserver() -> None:
    assert loaded_after("echo hello") == "False False"


def test_the_first_agent_request_imports_it() -> None:
    # the agent asks permission: our dispatcher serves it through jsonrpcserver
    assert loaded_after("permission") == "True True"
