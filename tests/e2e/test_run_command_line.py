"""The command line a newcomer types (issue #21, items 17, 18, 20 and 24's ``--help`` event
list), through the real ``acp-bridge`` process: ``run AGENT -m hi`` without ``--``, an empty
``--conversation``, a terminal that would show a blank screen, listings whose reader goes away,
and ``run --help``'s list of ``--json`` events against the kinds the code emits."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_run_start_auth_ask import ECHO, ENV, ROOT, Terminal

NOTICE = b"reading messages from the terminal, one per line (Enter sends it); Ctrl-D ends"


def bridge(
    cwd: Path, *args: str, stdin: str = "", stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acp_bridge", *args],
        input=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=60,
    )


def usage_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    return line


# -- 17: an agent command without -- --------------------------------------------------------------


def test_run_agent_then_m_without_the_separator_is_refused_showing_the_right_form(
    tmp_path: Path,
) -> None:
    """Before #21 ``-m hi`` went to the agent: nothing was prompted, an empty conversation was
    stored, exit 0."""
    store = tmp_path / "s.db"
    result = bridge(tmp_path, "run", "--store", str(store), *ECHO, "-m", "echo hi")
    line = usage_error(result)
    assert "-m came after the agent command" in line
    assert f"acp-bridge run [OPTIONS] -m 'echo hi' -- {' '.join(ECHO)}" in line
    assert not store.exists()


def test_run_agent_without_the_separator_and_without_m_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    result = bridge(tmp_path, "run", "--store", str(store), *ECHO, stdin="echo hi\n")
    line = usage_error(result)
    assert "the agent command needs -- before it" in line
    assert f"acp-bridge run [OPTIONS] -m TEXT -- {' '.join(ECHO)}" in line
    assert not store.exists()


def test_words_after_agent_name_are_shown_as_the_message_they_meant(tmp_path: Path) -> None:
    result = bridge(tmp_path, "run", "--agent", "goose", "fix", "the", "tests")
    line = usage_error(result)
    assert "write acp-bridge run [OPTIONS] --agent goose -m 'fix the tests'" in line


def test_m_before_an_agent_command_without_the_separator_still_runs(tmp_path: Path) -> None:
    """A message source was given, so nothing is lost: the documented form stays accepted."""
    result = bridge(tmp_path, "run", "--store", str(tmp_path / "s.db"), "-m", "echo hi", *ECHO)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi\n"


def test_on_a_terminal_run_says_it_reads_a_message_per_line_until_ctrl_d(tmp_path: Path) -> None:
    """Before #21 the screen stayed blank, waiting for input nobody knew it wanted."""
    terminal = Terminal(["--store", str(tmp_path / "s.db"), "--", *ECHO], tmp_path)
    try:
        terminal.read_until(NOTICE)
        terminal.type(b"echo typed\r")
        terminal.read_until(b"[done] end_turn")
        terminal.type(b"\x04")  # Ctrl-D at the start of a line: the end of the input
        assert terminal.finish() == 0
        assert terminal.seen.count(NOTICE) == 1
    finally:
        terminal.close()


def test_no_notice_when_the_messages_come_from_m_or_a_pipe(tmp_path: Path) -> None:
    terminal = Terminal(["--store", str(tmp_path / "s.db"), "-m", "echo x", "--", *ECHO], tmp_path)
    try:
        assert terminal.finish() == 0
        assert b"[done] end_turn" in terminal.seen and NOTICE not in terminal.seen
    finally:
        terminal.close()
    piped = bridge(
        tmp_path, "run", "--store", str(tmp_path / "s.db"), "--", *ECHO, stdin="echo y\n"
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "y\n" and NOTICE.decode() not in piped.stderr


# -- 18: an empty id ------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--conversation", "--session-id"])
def test_an_empty_id_is_a_usage_error(tmp_path: Path, option: str) -> None:
    """Before #21 ``--conversation ''`` started a new conversation."""
    store = tmp_path / "s.db"
    result = bridge(tmp_path, "run", "--store", str(store), option, "", "-m", "hi", "--", *ECHO)
    line = usage_error(result)
    assert f"argument {option}: an empty id names nothing" in line
    assert not store.exists()


# -- 20: a reader that goes away ------------------------------------------------------------------


@pytest.fixture
def closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose reader is gone before anything is written: the first write
    fails at once (``| head -1`` that already exited), whatever the timing."""
    read, write = os.pipe()
    os.close(read)
    yield write
    os.close(write)


@pytest.mark.parametrize(
    "command",
    [
        ["conversations"],
        ["conversations", "--json"],
        ["show", "ID"],
        ["show", "--json", "ID"],
        ["agents"],
        ["agents", "--json"],
    ],
    ids=" ".join,
)
def test_a_listing_whose_reader_went_away_ends_quietly(
    tmp_path: Path, closed_pipe: int, command: list[str]
) -> None:
    """Before #21: a BrokenPipeError traceback, exit 1. Now as ``run`` does it (one
    implementation, cli/guarded_output.py): the output ends, the exit code is the command's."""
    store = tmp_path / "s.db"
    made = bridge(tmp_path, "run", "--json", "--store", str(store), "-m", "echo hi", "--", *ECHO)
    assert made.returncode == 0, made.stderr
    conversation = re.search(r'"conversation":"([0-9a-f]+)"', made.stdout)
    assert conversation is not None, made.stdout
    args = [conversation[1] if word == "ID" else word for word in command]
    if command[0] != "agents":
        args += ["--store", str(store)]
    result = bridge(tmp_path, *args, stdout=closed_pipe)
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr


def test_prune_goes_on_when_its_reader_went_away(tmp_path: Path, closed_pipe: int) -> None:
    store = tmp_path / "s.db"
    for _ in range(2):
        made = bridge(tmp_path, "run", "--store", str(store), "-m", "echo hi", "--", *ECHO)
        assert made.returncode == 0, made.stderr
    result = bridge(tmp_path, "prune", "--keep", "0", "--store", str(store), stdout=closed_pipe)
    assert result.returncode == 0, result.stderr
    assert "removed 2 conversations" in result.stderr and "Traceback" not in result.stderr
    listed = bridge(tmp_path, "conversations", "--json", "--store", str(store))
    assert listed.returncode == 0 and listed.stdout == ""


# -- 24: the --json event list in run --help ------------------------------------------------------


def help_events() -> list[str]:
    shown = bridge(ROOT, "run", "--help")
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    found = re.search(r"--json events: (.*?) \(each with", text)
    assert found is not None, text
    return found[1].split(", ")


def emitted_event_kinds() -> set[str]:
    """Every kind of event ``run --json`` can print, read from the code that makes them:

    * ``emit(...)``/``_emit(...)`` calls with a literal kind (the conversation's events);
    * the kinds a ``FinalEvent`` is built with (``turn_ended``/``turn_failed``), the variable
      passed to it followed to its literal assignments;
    * the kinds ``lifecycle_json`` returns (the agent's lifecycle events);
    * ``{"event": "<kind>", ...}`` dicts built in the CLI (``error``).

    A call that emits a kind this reading can't see fails the test, to be taught here."""
    kinds: set[str] = set()
    packages = [ROOT / "acp_bridge" / "conversation", ROOT / "acp_bridge" / "cli"]
    for path in sorted(p for package in packages for p in package.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                kinds |= _kinds_in(function, path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if _literal(key) == "event" and _literal(value) is not None:
                        kinds.add(str(_literal(value)))
    return kinds


def _kinds_in(function: ast.FunctionDef | ast.AsyncFunctionDef, path: Path) -> set[str]:
    kinds: set[str] = set()
    assigned: dict[str, set[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and _literal(node.value) is not None:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, set()).add(str(_literal(node.value)))
    for node in ast.walk(function):
        if function.name == "lifecycle_json" and isinstance(node, ast.Return):
            assert isinstance(node.value, ast.Tuple), ast.unparse(node)
            kinds.add(str(_literal(node.value.elts[0])))
        if not isinstance(node, ast.Call) or not node.args:
            continue
        called = _name(node.func)
        first = node.args[0]
        if called == "FinalEvent":
            assert isinstance(first, ast.Name), ast.unparse(node)
            kinds |= assigned[first.id]
        elif called in ("emit", "_emit"):
            if _literal(first) is not None:
                kinds.add(str(_literal(first)))
            else:  # forwarded: a wrapper's parameter, or a FinalEvent's name (read above)
                where = f"{path.name}: {ast.unparse(node)}"
                assert ast.unparse(first) in ("name", "end.name"), f"unreadable kind in {where}"
    return kinds


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def test_run_help_lists_every_json_event_the_code_can_emit() -> None:
    """Before #21 ``run --help`` left out queued, tool_call_closed and error."""
    listed = help_events()
    assert len(listed) == len(set(listed))
    assert set(listed) == emitted_event_kinds()


def test_the_readme_lists_the_same_json_events() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("With `--json`, stdout carries one NDJSON event per line")
    paragraph = readme[start : readme.index("\n\n", start)]
    named = re.findall(r"`([a-z_]+)`", paragraph)
    assert set(help_events()) <= set(named)
