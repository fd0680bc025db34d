"""What the bench, soak and interop scripts share: where the checkout is, which commit it is,
the machine a figure was measured on, a child process on this checkout, and a section of a
Markdown file rewritten in place. It imports nothing else of scripts/, so every package can
import it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The checkout: the ``acp_bridge`` every script measures, and ``fixtures/``."""
PACKAGES = ("anyio", "trio", "pydantic", "psutil", "agent-client-protocol")


def machine() -> str:
    """CPU, cores, OS, Python, SQLite and the versions of the packages that matter here."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    packages = []
    for name in PACKAGES:
        try:
            packages.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            packages.append(f"{name} (missing)")
    return (
        f"{cpu}, {os.cpu_count()} cores; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        f"{', '.join(packages)}"
    )


def code_version() -> str:
    """The commit measured, and whether the library or the agents had uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "acp_bridge", "fixtures")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"commit {commit}" + (" plus uncommitted changes" if dirty else "")


def module_command(module: str, *args: str, unbuffered: bool = False) -> list[str]:
    """The argv of ``python -m module args`` on this checkout, whatever the child's cwd and
    environment: the checkout goes first on its ``sys.path`` (its ``acp_bridge`` and its
    ``scripts``), as ``python scripts/NAME.py`` puts it first for the parent."""
    start = (
        f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, *(["-u"] if unbuffered else []), "-c", start, *args]


def write_section(path: Path, name: str, body: str, intro: str = "") -> None:
    """Replace the ``<!-- NAME:start -->`` ... ``<!-- NAME:end -->`` section of ``path``,
    keeping the rest; the first time, append ``intro`` and the section."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    section = f"{start}\n{body}{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + section + after
    else:
        text = text.rstrip() + "\n\n" + (intro + "\n" if intro else "") + section + "\n"
    path.write_text(text)
