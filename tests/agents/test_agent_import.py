"""The core never pays for the agent: ``import acp_bridge``, the library's API, the CLI's parser
and the agent's own modules import no litellm (only a running agent does, in its process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.agents.agent_client import ROOT, SCRIPT, agent_env, requires_litellm

_CHECK = """
import sys
{body}
loaded = sorted(m for m in sys.modules if m == "litellm" or m.startswith(("litellm.", "acp.")))
assert not loaded, loaded
assert "acp" not in sys.modules
print("clean")
"""


def _run_clean(body: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHECK.format(body=body)],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "clean"


def test_import_and_api_do_not_import_litellm() -> None:
    _run_clean(
        "import acp_bridge\n"
        "acp_bridge.open_supervised_agent, acp_bridge.ClientOptions, acp_bridge.AgentSpec\n"
        "import acp_bridge.conversation.opening"
    )


def test_cli_help_does_not_import_litellm() -> None:
    _run_clean(
        "from acp_bridge.cli.main import main\n"
        "for argv in (['--help'], ['agent', '--help'], ['demo', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, exit.code\n"
    )


def test_agent_modules_import_litellm_only_when_running() -> None:
    _run_clean(
        "import acp_bridge.agents.server, acp_bridge.agents.model, acp_bridge.agents.turn\n"
        "import acp_bridge.cli.agent_cmd, acp_bridge.cli.demo"
    )


@requires_litellm
def test_bad_mock_script_is_one_line_exit_2(tmp_path: object) -> None:
    bad = ROOT / "pyproject.toml"  # not JSON
    result = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "agent", "--mock-script", str(bad)],
        capture_output=True,
        text=True,
        env=agent_env(),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "bad --mock-script" in result.stderr
    assert SCRIPT.is_file()


def test_claim_stdout_leaves_fd_1_to_frames_only() -> None:
    """Whatever else writes to stdout (print, sys.stdout, a raw write to fd 1, a child process)
    lands on stderr; only the private duplicate reaches the real stdout."""
    body = (
        "import os, subprocess, sys\n"
        "from acp_bridge.cli.agent_cmd import claim_stdout\n"
        "frames = claim_stdout()\n"
        "print('a print')\n"
        "sys.stdout.write('sys.stdout\\n'); sys.stdout.flush()\n"
        "os.write(1, b'raw fd 1\\n')\n"
        "subprocess.run([sys.executable, '-c', 'print(\"a child\")'], check=True)\n"
        'os.write(frames, b\'{"jsonrpc":"2.0","method":"x"}\\n\')\n'
    )
    result = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, env=agent_env(), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == '{"jsonrpc":"2.0","method":"x"}\n'
    for noise in ("a print", "sys.stdout", "raw fd 1", "a child"):
        assert noise in result.stderr


def _without_litellm(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in an interpreter where litellm cannot be found (as without the extra)."""
    code = (
        "import sys\n"
        "sys.modules['litellm'] = None  # find_spec() now answers None, import fails\n"
        "from acp_bridge.cli.main import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=agent_env(),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_agent_and_demo_without_the_extra_say_what_to_install() -> None:
    for command in ("agent", "demo"):
        result = _without_litellm(command)
        assert result.returncode == 3, (command, result.stderr)
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1, result.stderr
        # A command that works from here, and never reaches the index's acp-bridge (another
        # project): this checkout with its extra.
        root = Path(__file__).resolve().parents[2]
        assert f"python -m pip install '{root}[agent]'" in result.stderr
        assert "acp-bridge[" not in result.stderr
