"""Config, registry, log and mock-script paths that are FIFOs (issue 21, item 5), through the
real ``acp-bridge``.

Before the fix each of these blocked in ``open`` until some writer opened the FIFO (forever,
here: the test's timeout fired). Now the path is looked at first and opened non-blocking, and
anything that is not a regular file is refused with one line and exit 2. Nothing here writes to
or reads from the FIFOs, so a process that opened one would wait forever: the ``timeout`` is a
guard against that hang, never a wait for something to happen.

(The proxy's ``--record`` file is opened by proxy/recorder.py, whose owner refuses FIFOs there.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
ECHO = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "echo_agent.py"), "--quiet"]
HANG_GUARD_S = 60


def bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=HANG_GUARD_S,
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_config_file_that_is_a_fifo_is_refused_without_blocking(fifo: Path) -> None:
    line = refusal(bridge("agents", "--config", str(fifo)))
    assert str(fifo) in line and "FIFO" in line, line


def test_a_config_file_named_by_the_environment_that_is_a_fifo_is_refused(fifo: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "agents"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**ENV, "ACP_BRIDGE_CONFIG": str(fifo)},
        timeout=HANG_GUARD_S,
    )
    line = refusal(result)
    assert str(fifo) in line and "FIFO" in line, line


def test_a_registry_file_that_is_a_fifo_is_refused_without_blocking(fifo: Path) -> None:
    line = refusal(bridge("agents", "--registry", str(fifo)))
    assert str(fifo) in line and "FIFO" in line, line


def test_a_registry_named_in_the_config_that_is_a_fifo_is_refused(
    fifo: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'registry = "{fifo}"\n')
    line = refusal(bridge("agents", "--config", str(config)))
    assert "FIFO" in line, line


def test_a_proxy_log_that_is_a_fifo_is_refused_without_blocking(fifo: Path) -> None:
    line = refusal(bridge("proxy", "--log", str(fifo), "--", *ECHO))
    assert str(fifo) in line and "FIFO" in line, line


def test_a_proxy_log_is_created_private(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    result = bridge("proxy", "-v", "--log", str(log), "--", *ECHO)
    assert result.returncode == 0, result.stderr
    assert log.stat().st_mode & 0o777 == 0o600
    assert "acp-bridge proxy:" in log.read_text()


def test_a_device_given_as_the_proxy_log_is_refused(tmp_path: Path) -> None:
    line = refusal(bridge("proxy", "--log", "/dev/null", "--", *ECHO))
    assert "/dev/null" in line and "a device" in line, line


@pytest.mark.skipif(
    importlib.util.find_spec("litellm") is None, reason="the built-in agent needs its extra"
)
def test_a_mock_script_that_is_a_fifo_is_refused_without_blocking(fifo: Path) -> None:
    result = bridge("agent", "--mock-script", str(fifo))
    line = refusal(result)
    assert str(fifo) in line and "FIFO" in line, line
