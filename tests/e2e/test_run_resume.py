"""``--resume`` and ``--session-id`` (issue #8, defects 6 and 13), through the real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "fixtures" / "agents"
ECHO = [sys.executable, "-u", str(AGENTS / "echo_agent.py")]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=timeout,
    )


def events(stdout: str, name: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [e for e in found if e["event"] == name]


def conversation_of(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    (session,) = events(result.stdout, "session")
    return str(session["conversation"])


def test_resume_takes_the_latest_conversation_of_this_cwd_and_agent(tmp_path: Path) -> None:
    """Before the fix --resume took the latest conversation of the whole store (here the other
    agent's, or the other directory's)."""
    store = str(tmp_path / "s.db")
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    other_agent = [*ECHO, "--quiet"]
    mine = conversation_of(
        run("--store", store, "--cwd", str(here), "--json", "-m", "echo 1", "--", *ECHO)
    )
    conversation_of(
        run("--store", store, "--cwd", str(there), "--json", "-m", "echo 2", "--", *ECHO)
    )
    conversation_of(
        run("--store", store, "--cwd", str(here), "--json", "-m", "echo 3", "--", *other_agent)
    )
    resumed = run(
        "--store", store, "--cwd", str(here), "--resume", "--json", "-m", "echo 4", "--", *ECHO
    )
    assert conversation_of(resumed) == mine
    assert [e["text"] for e in events(resumed.stdout, "turn_started")] == ["echo 4"]


def test_a_conversation_whose_agent_never_started_is_not_resumed(tmp_path: Path) -> None:
    """The same agent command once started and once failed to (its script was missing): the
    failed one is the latest in the store, but --resume continues the one that started. Before
    the fix --resume took the failed one."""
    store = str(tmp_path / "s.db")
    script = tmp_path / "agent.py"
    body = f"import runpy, sys\nsys.path.insert(0, {str(AGENTS)!r})\n"
    body += f"runpy.run_path({str(AGENTS / 'echo_agent.py')!r}, run_name='__main__')\n"
    agent = [sys.executable, "-u", str(script)]
    script.write_text(body)
    started = conversation_of(run("--store", store, "--json", "-m", "echo 1", "--", *agent))
    script.unlink()
    failed = run("--store", store, "--json", "-m", "echo 2", "--", *agent)
    assert failed.returncode == 3, failed.stderr
    script.write_text(body)
    resumed = run("--store", store, "--resume", "--json", "-m", "echo 3", "--", *agent)
    assert conversation_of(resumed) == started
    # Nothing to resume at all: a usage error naming the directory, not a new start.
    nothing = run("--store", store, "--resume", "-m", "echo 4", "--", *ECHO, "--quiet")
    assert nothing.returncode == 2
    assert "no stored conversation to resume" in nothing.stderr


def test_the_conversation_id_is_on_stderr_with_verbose(tmp_path: Path) -> None:
    result = run("--store", str(tmp_path / "s.db"), "-v", "--json", "-m", "echo hi", "--", *ECHO)
    conversation = conversation_of(result)
    assert f"conversation {conversation}" in result.stderr


def test_an_unknown_session_id_exits_3_and_prompts_nothing(tmp_path: Path) -> None:
    """Before the fix an unknown --session-id quietly started a new session and exited 0."""
    result = run(
        "--store", str(tmp_path / "s.db"), "--json", "--session-id", "sess_nope",
        "-m", "echo hi", "--", *ECHO,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "sess_nope" in result.stderr
    assert events(result.stdout, "turn_started") == []
    assert "Traceback" not in result.stderr


def test_a_known_session_id_is_restored(tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    agent = [*ECHO, "--history", str(history)]
    first = run("--store", str(tmp_path / "a.db"), "--json", "-m", "echo hi", "--", *agent)
    assert first.returncode == 0, first.stderr
    session_id = events(first.stdout, "session")[0]["sessionId"]
    again = run(
        "--store", str(tmp_path / "b.db"), "--json", "--session-id", session_id,
        "-m", "echo again", "--", *agent,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    (session,) = events(again.stdout, "session")
    assert (session["sessionId"], session["how"]) == (session_id, "load")


# -- --retry-failed (defect 13) -----------------------------------------------------------------


def test_retry_failed_sends_the_failed_message_again_and_it_ends_done(tmp_path: Path) -> None:
    """A message failed by an agent crash (recoverable) is sent again by --resume
    --retry-failed, under its own seq, and ends done: exit 0. Before the fix the option did not
    exist (exit 2) and nothing could send the message again."""
    store = str(tmp_path / "s.db")
    agent = [
        *ECHO,
        "--history", str(tmp_path / "history.json"),
        "--crash-once-file", str(tmp_path / "crashed"),
    ]  # fmt: skip
    first = run("--store", store, "--json", "-m", "echo one; crash KILL", "--", *agent)
    assert first.returncode == 4, first.stderr
    (failed,) = events(first.stdout, "turn_failed")
    assert failed["recoverable"] is True
    conversation = events(first.stdout, "session")[0]["conversation"]

    again = run(
        "--store", store, "--json", "--resume", "--retry-failed", "-m", "echo two", "--", *agent
    )
    assert again.returncode == 0, again.stderr
    assert events(again.stdout, "session")[0]["conversation"] == conversation
    started = [(e["seq"], e["text"]) for e in events(again.stdout, "turn_started")]
    assert started == [(failed["seq"], "echo one; crash KILL"), (failed["seq"] + 1, "echo two")]
    ended = [(e["seq"], e["state"]) for e in events(again.stdout, "turn_ended")]
    assert ended == [(failed["seq"], "done"), (failed["seq"] + 1, "done")]


def test_retry_failed_needs_a_conversation_to_continue(tmp_path: Path) -> None:
    result = run("--store", str(tmp_path / "s.db"), "--retry-failed", "-m", "hi", "--", *ECHO)
    assert result.returncode == 2
    assert "--retry-failed needs --resume" in result.stderr


def test_a_conversation_continued_from_another_directory_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    """Before, ``--conversation ID`` without ``--cwd`` quietly continued in the stored
    directory, whatever directory the user ran it from."""
    store = str(tmp_path / "s.db")
    first = run("--store", store, "--json", "-m", "hi", "--", *ECHO)
    conversation = conversation_of(first)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "run", "--store", store,
         "--conversation", conversation, "-m", "again"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=elsewhere, env=ENV,
        timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert f"was started in {ROOT}, not {elsewhere}" in refused.stderr
    assert f"--cwd {ROOT}" in refused.stderr
    from_there = run("--store", store, "--conversation", conversation, "-m", "again")
    assert from_there.returncode == 0, from_there.stderr


def test_resume_continues_a_queue_a_signal_paused(tmp_path: Path) -> None:
    """A stop (SIGTERM) pauses the conversation's queue. Before, ``--resume`` with no new
    message left it paused: exit 4, nothing said, message 2 still queued."""
    import signal

    store = str(tmp_path / "s.db")
    first = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "run", "--store", store, "--json",
         "-m", "echo one; wait 30", "-m", "echo two", "--", *ECHO],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=ROOT, env=ENV,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        for line in first.stdout:
            if json.loads(line)["event"] == "turn_started":
                break
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 130
    again = run("--store", store, "--json", "--resume", "--", *ECHO)
    assert again.returncode == 0, again.stderr
    assert "was paused by a stop; its queue goes on" in again.stderr
    ended = [(e["seq"], e["state"]) for e in events(again.stdout, "turn_ended")]
    assert ended == [(2, "done")]
