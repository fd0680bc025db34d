"""Issue #21 item 24: "The ``conversations`` AGENT column and the ``/mode`` list are misaligned."

Column widths now come from the content, measured in terminal columns (a CJK character takes
two): long agent commands, long and wide working directories, long and wide mode ids."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from acp_bridge.cli.columns import aligned, display_width
from tests.e2e.test_chat import agent, chat
from tests.e2e.test_run_start_auth_ask import ECHO, ENV, run

CWDS = ("a", "a-much-longer-directory-name", "日本語のディレクトリ")


def test_the_conversations_agent_column_starts_at_one_column(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    for index, name in enumerate(CWDS):
        cwd = tmp_path / name
        cwd.mkdir()
        extra = ["--name", "x" * 40] if index == 1 else []
        result = run("--store", store, "-m", "hi", "--", *ECHO, "--quiet", *extra, cwd=cwd)
        assert result.returncode == 0, result.stderr
    listing = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "conversations", "--store", store],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert len(rows) == 3
    agent_at = display_width(header[: header.index("AGENT")])
    cwd_at = display_width(header[: header.index("CWD")])
    for row in rows:
        where = row.index(sys.executable)
        assert display_width(row[:where]) == agent_at, listing.stdout
        assert display_width(row[: row.index(str(tmp_path))]) == cwd_at, listing.stdout


def test_the_mode_list_keeps_its_names_in_one_column(tmp_path: Path) -> None:
    modes = "ask,architect-review,代码x"
    with chat(["--", *agent("echo_agent.py", "--settings", "--modes", modes)], tmp_path) as term:
        term.say("/mode")
        seen = term.read_until(b"choose one: /mode ID")
        listing = seen.decode()[seen.decode().rindex("modes:") :]
        lines = listing.split("\r\n")[1:4]
        assert [line.split()[-1] for line in lines] == ["Ask", "Architect-Review", "代码X"]
        starts = {display_width(line[: line.rindex(line.split()[-1])]) for line in lines}
        assert len(starts) == 1, lines
        assert re.match(r" \* ask +Ask$", lines[0]), lines
        term.say("/mode 代码x")
        term.read_until("mode: 代码x".encode())
        term.say("/quit")
        assert term.finish() == 0


def test_aligned_pads_every_column_but_the_last_in_terminal_columns() -> None:
    rows = [("ID", "NAME", "NOTE"), ("代码", "x", "wide id"), ("long-id", "名前", "")]
    assert aligned(rows, indent=" ") == [
        " ID       NAME  NOTE",
        " 代码     x     wide id",
        " long-id  名前",
    ]
    assert aligned([("a", "b"), ("only",)]) == ["a  b", "only"]  # a last cell sets no width
    assert display_width("\x1b[36mé\x1b[0m") == 1 and display_width("e\u0301") == 1
