"""``acp-bridge replay`` on hostile files (#20 defect 9): whatever the file holds, replay reads a
bounded amount of it and refuses what is not a recording with one clear line and exit 2. Before,
a line of 100,000 nested brackets gave a RecursionError traceback, ``replay /dev/zero`` read
until memory ran out, and NaN was accepted (and written back, which is not JSON).

Each replay runs with its address space limited to 1 GiB: reading without a bound would end
in a MemoryError, not in the refusal these tests expect."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.proxy.harness import ENV, ROOT

RECORDINGS = ROOT / "fixtures" / "recordings"
MEMORY_LIMIT = 1 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_replay(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``acp-bridge replay`` with a client that sends nothing and closes at once."""
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", "replay", *options, str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
        preexec_fn=_limit_memory,
    )


def _entry(message: str) -> str:
    return '{"t":1,"dir":"agent->bridge","msg":' + message + "}\n"


def _recording_with(line: str) -> str:
    return (RECORDINGS / "echo-session.ndjson").read_text() + line


def _write(text: str) -> Callable[[Path], Path]:
    def make(tmp_path: Path) -> Path:
        path = tmp_path / "hostile.ndjson"
        path.write_text(text)
        return path

    return make


def _sparse(tmp_path: Path) -> Path:
    """8 GiB of zero bytes that take no disk: a file that never ends a line."""
    path = tmp_path / "zeros.ndjson"
    with path.open("wb") as file:
        file.truncate(8 << 30)
    return path


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.ndjson"
    os.mkfifo(path)  # nobody writes it: opening it to read would wait for ever
    return path


HOSTILE = {
    "brackets": (_write("[" * 100_000 + "]" * 100_000 + "\n"), "line 1 is not JSON: nested"),
    "deep-message": (
        _write(_recording_with(_entry('{"x":' + "[" * 300 + "]" * 300 + "}"))),
        "line 18 is not JSON: nested deeper than 200 levels",
    ),
    "nan": (
        _write(_recording_with(_entry('{"jsonrpc":"2.0","method":"x","params":{"v":NaN}}'))),
        "line 18 is not JSON: NaN is not a JSON number",
    ),
    "infinity": (
        _write(_recording_with(_entry('{"jsonrpc":"2.0","method":"x","params":{"v":-1e999}}'))),
        "line 18 is not JSON: -1e999 does not fit a double",
    ),
    "no-line-end": (_sparse, "line 1 has no end within 134217728 bytes"),
    "dev-zero": (lambda _: Path("/dev/zero"), "it is a device, not a regular file"),
    "fifo": (_fifo, "it is a FIFO (named pipe), not a regular file"),
    "cut-last-line": (
        _write(_recording_with('{"t":1,"dir":"agent->bridge","msg":{"jsonrpc":"2.')),
        "its last line (18) is cut: the file ends inside it (--allow-partial skips it)",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_file_is_refused_in_one_line(case: str, tmp_path: Path) -> None:
    make, reason = HOSTILE[case]
    path = make(tmp_path)
    done = run_replay(path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"acp-bridge replay: {path} is not a usable recording: "), line
    assert reason in line


def test_the_file_is_read_up_to_max_bytes(tmp_path: Path) -> None:
    path = RECORDINGS / "echo-session.ndjson"
    size = path.stat().st_size
    done = run_replay(path, "--max-bytes", str(size // 2))
    assert done.returncode == 2
    assert done.stderr == (
        f"acp-bridge replay: {path} is not a usable recording: "
        f"it is longer than {size // 2} bytes (--max-bytes)\n"
    )
    assert run_replay(path, "--max-bytes", str(size), "--allow-partial").returncode == 0


def test_allow_partial_skips_a_cut_last_line_only(tmp_path: Path) -> None:
    whole = (RECORDINGS / "echo-session.ndjson").read_text()
    cut = tmp_path / "cut.ndjson"
    cut.write_text(whole + '{"t":1,"dir":"agent->bridge","msg":{"jsonrpc":"2.')
    done = run_replay(cut, "--allow-partial")
    assert (done.returncode, done.stderr) == (0, "")
    inside = tmp_path / "inside.ndjson"
    inside.write_text('{"t":1,"dir":"agent->bridge","msg":{"jsonrpc":"2.\n' + whole)
    done = run_replay(inside, "--allow-partial")
    assert done.returncode == 2 and "line 1 is not JSON" in done.stderr
