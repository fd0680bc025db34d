"""The name this project installs under is not PyPI's acp-bridge (another project), and every
install hint works without the index's acp-bridge."""

from __future__ import annotations

import tomllib
from pathlib import Path

from acp_bridge.version import DISTRIBUTION, agent_extra_install

ROOT = Path(__file__).resolve().parents[2]


def test_the_distribution_name_is_ours_and_the_command_and_package_stay() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION == "acp-supervisor"
    assert project["scripts"]["acp-bridge"].startswith("acp_bridge")
    assert project["optional-dependencies"]["agent"] == ["litellm>=1.80,<2"]


def test_the_agent_extra_hint_names_this_checkout() -> None:
    assert agent_extra_install() == f"python -m pip install '{ROOT}[agent]'"


def test_no_install_line_names_the_index_acp_bridge() -> None:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    texts += sorted((ROOT / "acp_bridge").rglob("*.py"))
    offenders = [str(p) for p in texts if "acp-bridge[" in p.read_text()]
    assert offenders == []
