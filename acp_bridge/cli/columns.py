"""Text in columns on a terminal: widths measured from the content, in terminal columns.

Pure (no I/O). Every table the command line prints (``conversations``, ``agents``, chat's
``/mode``, ``/model`` and ``/help``) goes through :func:`aligned`, so one long agent command
or one wide name moves its whole column instead of the cells after it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Final

__all__ = ["aligned", "display_width"]

_ESCAPES: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal: escape sequences (colors) and combining marks take
    none, wide East Asian characters (CJK, fullwidth forms) two."""
    plain = _ESCAPES.sub("", text)
    return sum(_char_width(ch) for ch in plain)


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def aligned(rows: Sequence[Sequence[str]], *, gap: str = "  ", indent: str = "") -> list[str]:
    """``rows`` as lines, each column but the last padded to its widest cell (in terminal
    columns); trailing spaces are dropped. Rows may be shorter than others."""
    count = max((len(row) for row in rows), default=0)
    widths = [
        max((display_width(row[i]) for row in rows if len(row) > i + 1), default=0)
        for i in range(count)
    ]
    lines = []
    for row in rows:
        cells = [
            cell + " " * (widths[i] - display_width(cell)) if i < len(row) - 1 else cell
            for i, cell in enumerate(row)
        ]
        lines.append((indent + gap.join(cells)).rstrip())
    return lines
