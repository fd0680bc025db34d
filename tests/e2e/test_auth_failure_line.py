"""Issue #21 item 24: "The auth failure repeats the provider's long message, names the library's
``ClientOptions.auth_method`` to a CLI user, and suggests ``OPENAI_API_KEY`` for an Anthropic
model."

Through the real ``acp-bridge run``: the built-in agent on an Anthropic model with no key (litellm
refuses it before any network call), and the fake agents' auth refusals. The user gets one line:
what failed, the variable that holds the model's provider key, and ``--auth-method`` when the
agent lists methods. The provider's own message is shown with ``-v`` only (the agent's log)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.agent_client import requires_litellm
from tests.e2e.test_run_start_auth_ask import BRIDGE, ECHO, ENV, events, run

NO_KEYS = {
    name: value
    for name, value in ENV.items()
    if not name.startswith(("ANTHROPIC_", "OPENAI_", "AZURE_", "GEMINI_"))
}
BUILTIN = [sys.executable, "-m", "acp_bridge", "agent", "--model", "anthropic/claude-sonnet-4-5"]


def run_keyless(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BRIDGE, *args, "--", *BUILTIN],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=NO_KEYS,
        timeout=120,
        start_new_session=True,
    )


def lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@requires_litellm
@pytest.mark.timeout(180)  # two runs of the built-in agent, each importing litellm: 36 s seen
def test_a_missing_anthropic_key_is_one_line_naming_its_variable(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    plain = run_keyless("--store", store, "-m", "hi", "-m", "two", cwd=tmp_path)
    assert plain.returncode == 3, plain.stderr
    assert lines(plain.stderr) == [
        "acp-bridge: acp_bridge requires authentication: anthropic/claude-sonnet-4-5: the "
        "provider refused the credentials; set ANTHROPIC_API_KEY"
    ]

    verbose = run_keyless("--store", store, "-v", "-m", "hi", cwd=tmp_path)
    assert verbose.returncode == 3, verbose.stderr
    assert verbose.stderr.count("requires authentication") == 1, verbose.stderr
    # the provider's long account, in the agent's own log, only with -v
    assert "Provider said: litellm.AuthenticationError: Missing Anthropic API Key" in (
        verbose.stderr
    )

    for wrong in ("OPENAI_API_KEY", "ClientOptions", "Provider said"):
        assert wrong not in plain.stderr, wrong


def test_an_agent_listing_an_auth_method_gets_one_line_with_the_flag(tmp_path: Path) -> None:
    at_start = run(
        "--store", str(tmp_path / "s.db"), "-m", "a", "--", *ECHO, "--require-auth",
        cwd=tmp_path,
    )  # fmt: skip
    assert at_start.returncode == 3, at_start.stderr
    assert lines(at_start.stderr) == [
        "acp-bridge: echo_agent requires authentication: Authentication required; run again "
        "with --auth-method fake-login (Fake login), or log in with the agent's own tool first"
    ]


def test_a_turn_refused_for_auth_is_told_once_without_the_library_option(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    argv = ["-m", "error -32000 Token expired", "-m", "two", "--", *ECHO, "--prompt-words"]
    plain = run("--store", store, *argv, cwd=tmp_path)
    assert plain.returncode == 3, plain.stderr
    assert lines(plain.stderr) == ["acp-bridge: echo_agent requires authentication: Token expired"]
    json_run = run("--store", store, "--json", *argv, cwd=tmp_path)
    (failed,) = [e for e in events(json_run.stdout) if e["event"] == "turn_failed"]
    assert failed["error"]["message"] == (
        "echo_agent requires authentication before session/prompt: Token expired"
    )
    assert "ClientOptions" not in json_run.stdout + json_run.stderr
