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
    "UnusableHomeError",
    "byte_count",
    "count",
    "default_state_dir",
    "default_store_path",
    "directory",
    "home_dir",
    "identifier",
    "seconds",
    "timeout_or_off",
    "xdg_base_dir",
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


def identifier(text: str) -> str:
    """An id (of a conversation, a session): any text but the empty string, which names
    nothing (``--conversation ''`` would otherwise mean "none given")."""
    if not text:
        raise argparse.ArgumentTypeError("an empty id names nothing; give the id")
    return text


# -- where files go by default ---------------------------------------------------------------------


class UnusableHomeError(Exception):
    """A default path needs the home directory and ``$HOME`` cannot be used (empty, relative,
    or unknown). ``acp-bridge`` reports it as one line, exit 2 (see :mod:`.main`)."""


def xdg_base_dir(variable: str, under_home: str) -> Path:
    """A base directory by the XDG Base Directory rules: ``$variable`` when it is an absolute
    path, else ``$HOME/under_home``. An empty or relative value is ignored, as the rules say
    (a relative one would move with the current directory).

    Raises UnusableHomeError when the home directory is needed and cannot be used."""
    value = os.environ.get(variable, "")
    if os.path.isabs(value):
        return Path(value)
    return home_dir(f"or {variable} to an absolute directory") / under_home


def home_dir(alternative: str = "") -> Path:
    """The home directory: ``$HOME``, or the password database's when it is unset. An empty or
    relative ``$HOME`` is refused (it would put our files under ``/`` or the current directory).
    ``alternative`` ends the message (e.g. "or XDG_STATE_HOME to an absolute directory").

    Raises UnusableHomeError."""
    home = os.environ.get("HOME")
    fix = f"set HOME to your home directory {alternative}".rstrip()
    if home is None:
        try:
            return Path.home()
        except (RuntimeError, KeyError):
            raise UnusableHomeError(f"HOME is not set and this user has no home: {fix}") from None
    if not os.path.isabs(home):
        what = "empty" if not home else f"a relative path ({home!r})"
        raise UnusableHomeError(f"HOME is {what}, so there is no home directory: {fix}")
    return Path(home)


def default_state_dir() -> Path:
    """Where acp-bridge keeps its state: ``$XDG_STATE_HOME/acp-bridge`` (``~/.local/state``
    without it). Here, in a light module, so every subcommand agrees without importing more.

    Raises UnusableHomeError."""
    return xdg_base_dir("XDG_STATE_HOME", ".local/state") / "acp-bridge"


def default_store_path() -> Path:
    """The conversations store every subcommand uses without ``--store``.

    Raises UnusableHomeError (its message says ``--store`` is the other way)."""
    try:
        return default_state_dir() / "store.db"
    except UnusableHomeError as exc:
        raise UnusableHomeError(f"{exc}, or give --store PATH") from None
