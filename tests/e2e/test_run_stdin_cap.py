"""``acp-bridge run``'s stdin at the --max-message-bytes cap, read through the one line splitter
(issue 19, item 5): each over-long line is refused by its number, once, and the lines after it
go on."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_run_contract import ECHO, run, stored_texts


def test_over_long_stdin_lines_are_refused_by_number_and_the_others_go_on(tmp_path: Path) -> None:
    """A whole over-long line between two others (all in one write, so usually one read), and
    an over-long last line that ends at EOF without a newline."""
    store = tmp_path / "s.db"
    long = b"echo " + b"x" * 200
    stdin = b"echo one\n" + long + b"\necho three\n" + long
    result = run("--store", str(store), "--max-message-bytes", "100", "--", *ECHO, stdin=stdin)
    assert result.returncode == 4, result.stderr
    assert result.stdout.splitlines() == ["one", "three"]
    refusals = [line for line in result.stderr.splitlines() if "refused" in line]
    assert refusals == [
        f"acp-bridge: stdin line {n} refused: longer than --max-message-bytes (100 bytes)"
        for n in (2, 4)
    ]
    assert stored_texts(store) == [(1, "done", "echo one"), (2, "done", "echo three")]
