"""Option values for the command line, checked at parse time (argparse ``type=`` functions).

A bad value is a usage error: argparse reports it as one line naming the option and the value,
and exits 2 (see :class:`OneLineParser`). Nothing here imports more than the standard library,
so ``--help`` stays within its startup budget.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import NoReturn

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "OneLineParser",
    "byte_count",
    "count",
    "directory",
    "seconds",
    "timeout_or_off",
]

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class OneLineParser(argparse.ArgumentParser):
    """Reports a usage error as one line on stderr (with where to look), exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def seconds(text: str) -> float:
    """A duration in seconds: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, not {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A duration in seconds that must be > 0 (a deadline that cannot be switched off)."""
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be a number of seconds > 0, not 0")
    return value


def timeout_or_off(text: str) -> float | None:
    """A deadline in seconds; 0 means off (None)."""
    value = seconds(text)
    return None if value == 0 else value


def count(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, not {text!r}")
    return value


def positive_count(text: str) -> int:
    """A whole number >= 1."""
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def byte_count(text: str) -> int:
    """A size in bytes >= 1."""
    value = count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a number of bytes >= 1, not {text!r}")
    return value


def directory(text: str) -> str:
    """An existing directory, as an absolute path."""
    path = os.path.abspath(os.path.expanduser(text))
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"the directory {text!r} does not exist")
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return path


def default_state_dir() -> Path:
    """Where acp-bridge keeps its state: ``$XDG_STATE_HOME/acp-bridge`` (``~/.local/state``
    without it). Here, in a light module, so every subcommand agrees without importing more."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "acp-bridge"


def default_store_path() -> Path:
    """The conversations store every subcommand uses without ``--store``."""
    return default_state_dir() / "store.db"
