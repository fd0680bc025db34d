"""No import circles in scripts/: the import graph of its modules, read with ast, has no cycle.

Every import counts, wherever it stands: at module level, under ``if TYPE_CHECKING:`` (a circle
of type imports still means neither module can be read, moved or tested without the other; the
soak's circle was one) and inside functions (scripts have no start-up budget that a lazy import
would serve, so a lazy import between two of them is a circle put off until run time).

An import names a module the way Python finds it: ``scripts.x.y`` from the checkout, and a bare
``x`` from scripts/ itself (the directory ``python scripts/NAME.py`` puts first on sys.path), a
package before a module of the same name. Imports of anything outside scripts/ are ignored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import Graph, cycles, import_graph

ROOT = Path(__file__).resolve().parents[2]


def scripts_graph(scripts: Path) -> Graph:
    """Each .py file under ``scripts`` -> the files under it that it imports: every import (in
    functions, under TYPE_CHECKING), a bare name looked up in scripts/ first (first on sys.path
    for ``python scripts/NAME.py``), else as ``scripts.x.y`` from the checkout."""
    return import_graph(scripts, lazy=True, type_checking=True, sys_path=(scripts, scripts.parent))


def _named(cycle: list[Path], root: Path) -> str:
    return " -> ".join(str(path.relative_to(root)) for path in cycle)


def test_scripts_import_no_module_that_imports_them_back() -> None:
    scripts = ROOT / "scripts"
    graph = scripts_graph(scripts)
    assert len(graph) > 20, "the graph should hold every module of scripts/"
    assert not cycles(graph), "import circles in scripts/:\n" + "\n".join(
        _named(cycle, ROOT) for cycle in cycles(graph)
    )


@pytest.fixture
def circular(tmp_path: Path) -> Path:
    """Today's soak circle in miniature: the main module defines the shared state and imports
    the parts, which import the state back for their annotations."""
    scripts = tmp_path / "scripts"
    (scripts / "soak").mkdir(parents=True)
    for name in ("__init__.py", "soak/__init__.py", "common.py", "checks.py"):
        (scripts / name).write_text('"""A module."""\n')
    (scripts / "soak.py").write_text("import checks\nfrom soak_runs import worker\n")
    (scripts / "soak_runs.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from soak import Soak\n"
    )
    (scripts / "soak" / "main.py").write_text("from scripts.soak import editor\n")
    (scripts / "soak" / "editor.py").write_text(
        "from scripts.common import ROOT\n\ndef later():\n    from . import main\n"
    )
    return scripts


def test_a_circle_is_found_and_named_whatever_the_import_looks_like(circular: Path) -> None:
    named = sorted(_named(cycle, circular.parent) for cycle in cycles(scripts_graph(circular)))
    # The bare ``soak`` is the package soak/, not soak.py: Python looks for a package first.
    # So the TYPE_CHECKING import there closes no circle, and the lazy relative one does.
    assert named == [
        "scripts/soak/editor.py -> scripts/soak/main.py -> scripts/soak/editor.py",
    ]
    (circular / "soak" / "__init__.py").unlink()
    (circular / "soak" / "main.py").unlink()
    (circular / "soak" / "editor.py").unlink()
    (circular / "soak").rmdir()
    named = [_named(cycle, circular.parent) for cycle in cycles(scripts_graph(circular))]
    assert named == ["scripts/soak.py -> scripts/soak_runs.py -> scripts/soak.py"]


def test_the_graph_follows_from_imports_of_submodules_and_ignores_the_outside(
    circular: Path,
) -> None:
    graph = scripts_graph(circular)
    soak = circular / "soak"
    assert graph[soak / "main.py"] == {soak / "__init__.py", soak / "editor.py"}
    assert graph[soak / "editor.py"] == {
        circular / "common.py",
        soak / "__init__.py",
        soak / "main.py",
    }
    assert graph[circular / "soak_runs.py"] == {soak / "__init__.py"}  # typing is outside
