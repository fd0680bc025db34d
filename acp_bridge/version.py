"""The package's version, in a module of its own: the modules inside the package read it from
here, never from the package's public face (``acp_bridge/__init__.py``), which sits on top of them
all (its names come from them) and re-exports it."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DISTRIBUTION", "__version__", "agent_extra_install"]

__version__ = "0.1.0.dev0"  # also pyproject.toml's [project] version

DISTRIBUTION = "acp-supervisor"
"""The name this project installs under (pyproject.toml's [project] name). The import package
stays ``acp_bridge`` and the command ``acp-bridge``: PyPI's ``acp-bridge`` is another project."""

_AGENT_EXTRA = "litellm>=1.80,<2"  # pyproject.toml's [agent] extra


def agent_extra_install() -> str:
    """A pip command that adds the built-in agent's extra to this installation, and never
    reaches the package index's ``acp-bridge`` (another project): from a checkout, the checkout
    with its extra; otherwise the extra's one dependency."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return f"python -m pip install '{checkout}[agent]'"
    return f"python -m pip install '{_AGENT_EXTRA}'"
