"""The package's version, in a module of its own: the modules inside the package read it from
here, never from the package's public face (``acp_bridge/__init__.py``), which sits on top of them
all (its names come from them) and re-exports it."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0.dev0"  # also pyproject.toml's [project] version
