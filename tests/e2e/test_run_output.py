"""Plain output through the real process (issue #8, "readable output"): the agent's text alone
on a piped stdout, the turn's structure on stderr; one transcript with color on a terminal;
hints at the flag that would have allowed what the agent asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.test_run_start_auth_ask import BRIDGE, ENV, Terminal

ROOT = Path(__file__).resolve().parents[2]
FS_AGENT = [sys.executable, "-u", str(ROOT / "fixtures" / "agents" / "fs_agent.py")]
TURN = "thought pondering; plan; tool; echo the answer"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BRIDGE, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=60,
        start_new_session=True,
    )


def test_a_piped_stdout_holds_the_text_and_stderr_the_turn(tmp_path: Path) -> None:
    result = run(
        "--store", str(tmp_path / "s.db"), "-m", TURN, "--", *FS_AGENT, "--prompt-words",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == "the answer\n"
    err = result.stderr
    for line in ("[thought] pondering", "[plan] 3 steps", "  [x] step 1", "[done] end_turn"):
        assert line in err, err
    assert "[tool] Run `make fake` (execute) pending" in err
    assert "[tool] Run `make fake` completed" in err
    assert "\x1b[" not in err


def test_a_refused_file_read_hints_at_allow_fs_once(tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("secret plans\n")
    result = run(
        "--store", str(tmp_path / "s.db"),
        "-m", f"read {target}", "-m", f"read {target}",
        "--", *FS_AGENT, "--prompt-words",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("read-error -32601") == 2
    assert result.stderr.count("--allow-fs lets it") == 1
    allowed = run(
        "--store", str(tmp_path / "s.db"), "--allow-fs", "-m", f"read {target}",
        "--", *FS_AGENT, "--prompt-words",
        cwd=tmp_path,
    )  # fmt: skip
    assert "read-ok secret plans" in allowed.stdout
    assert "--allow-fs" not in allowed.stderr


def test_on_a_terminal_one_colored_transcript(tmp_path: Path) -> None:
    env = {k: v for k, v in ENV.items() if k != "NO_COLOR"}
    terminal = Terminal(
        ["--store", str(tmp_path / "s.db"), "-m", TURN, "--", *FS_AGENT, "--prompt-words"],
        tmp_path,
        env={**env, "TERM": "xterm"},
    )
    try:
        seen = terminal.read_until(b"[done] end_turn")
        assert b"\x1b[2m[thought] " in seen
        assert b"\x1b[36m[tool] Run `make fake` completed\x1b[0m" in seen
        assert seen.index(b"[tool]") < seen.index(b"the answer") < seen.index(b"[done]")
        assert terminal.finish() == 0
    finally:
        terminal.close()


def test_no_color_turns_color_off_on_a_terminal(tmp_path: Path) -> None:
    terminal = Terminal(
        ["--store", str(tmp_path / "s.db"), "-m", TURN, "--", *FS_AGENT, "--prompt-words"],
        tmp_path,
        env={**ENV, "TERM": "xterm", "NO_COLOR": "1"},
    )
    try:
        seen = terminal.read_until(b"[done] end_turn")
        assert b"\x1b[" not in seen
        assert terminal.finish() == 0
    finally:
        terminal.close()




def test_a_reader_that_goes_away_stops_the_run_without_a_traceback(tmp_path: Path) -> None:
    """``acp-bridge run --json ... | head -1``: before, the first write after the reader left
    raised BrokenPipeError out of the printer, a traceback and exit 1. Now the run stops as a
    first signal would: the turn is recorded cancelled, the agent stopped, exit 130."""
    import contextlib
    import sqlite3

    store = tmp_path / "s.db"
    bridge = subprocess.Popen(
        [*BRIDGE, "--json", "--store", str(store), "-m", "flood 200000",
         "--", *FS_AGENT, "--prompt-words"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=tmp_path, env=ENV, start_new_session=True,
    )  # fmt: skip
    try:
        assert bridge.stdout is not None
        for line in bridge.stdout:  # read until the turn runs, then stop reading
            if b'"event":"turn_started"' in line:
                break
        bridge.stdout.close()  # the reader goes away, as head does
        _, err = bridge.communicate(timeout=60)
    finally:
        bridge.kill()
    assert bridge.returncode == 130, err
    assert b"Traceback" not in err and b"stdout was closed" in err
    with contextlib.closing(sqlite3.connect(store)) as db:
        assert list(db.execute("SELECT state FROM messages")) in ([("cancelled",)], [("done",)])
