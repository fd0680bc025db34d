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

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
Graph = dict[Path, set[Path]]


def _module_file(base: Path, dotted: str) -> Path | None:
    """The file Python loads for ``dotted`` under ``base``: a package's __init__.py first."""
    path = base.joinpath(*dotted.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path, scripts: Path) -> str:
    """The dotted package a file belongs to, ``scripts`` at the top."""
    parts = path.relative_to(scripts.parent).with_suffix("").parts
    return ".".join(parts if path.name == "__init__.py" else parts[:-1])


def _imported(path: Path, scripts: Path) -> set[str]:
    """Every dotted name ``path`` imports, relative imports made absolute; for ``from X import
    y`` both ``X`` and ``X.y`` (y may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = _package_of(path, scripts).split(".")
                base = ".".join(package[: len(package) - node.level + 1])
                module = f"{base}.{module}" if module else base
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def import_graph(scripts: Path) -> Graph:
    """Each .py file under ``scripts`` -> the files under it that it imports."""
    graph: Graph = {}
    for path in sorted(scripts.rglob("*.py")):
        targets: set[Path] = set()
        for name in _imported(path, scripts):
            # A bare x from scripts/ itself (first on sys.path for scripts/NAME.py), else
            # scripts.x.y from the checkout.
            found = _module_file(scripts, name) or _module_file(scripts.parent, name)
            if found is not None and found.is_relative_to(scripts) and found != path:
                targets.add(found)
        graph[path] = targets
    return graph


def cycles(graph: Graph) -> list[list[Path]]:
    """One cycle per strongly connected component that has one (Tarjan), as a path that starts
    and ends at the same file."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    found: list[list[Path]] = []

    def visit(node: Path) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_walk_around(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _walk_around(graph: Graph, component: set[Path]) -> list[Path]:
    """A cycle through a strongly connected component: from its first file, the shortest way
    back to it (breadth first), so the message names a real chain of imports."""
    start = min(component)
    came_from: dict[Path, Path] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(came_from[chain[-1]])
                    return [start, *reversed(chain[:-1]), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"not strongly connected: {sorted(component)}")


def _named(cycle: list[Path], root: Path) -> str:
    return " -> ".join(str(path.relative_to(root)) for path in cycle)


def test_scripts_import_no_module_that_imports_them_back() -> None:
    scripts = ROOT / "scripts"
    graph = import_graph(scripts)
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
    named = sorted(_named(cycle, circular.parent) for cycle in cycles(import_graph(circular)))
    # The bare ``soak`` is the package soak/, not soak.py: Python looks for a package first.
    # So the TYPE_CHECKING import there closes no circle, and the lazy relative one does.
    assert named == [
        "scripts/soak/editor.py -> scripts/soak/main.py -> scripts/soak/editor.py",
    ]
    (circular / "soak" / "__init__.py").unlink()
    (circular / "soak" / "main.py").unlink()
    (circular / "soak" / "editor.py").unlink()
    (circular / "soak").rmdir()
    named = [_named(cycle, circular.parent) for cycle in cycles(import_graph(circular))]
    assert named == ["scripts/soak.py -> scripts/soak_runs.py -> scripts/soak.py"]


def test_the_graph_follows_from_imports_of_submodules_and_ignores_the_outside(
    circular: Path,
) -> None:
    graph = import_graph(circular)
    soak = circular / "soak"
    assert graph[soak / "main.py"] == {soak / "__init__.py", soak / "editor.py"}
    assert graph[soak / "editor.py"] == {
        circular / "common.py",
        soak / "__init__.py",
        soak / "main.py",
    }
    assert graph[circular / "soak_runs.py"] == {soak / "__init__.py"}  # typing is outside
