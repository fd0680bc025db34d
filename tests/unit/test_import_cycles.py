"""No import circles in ``acp_bridge/`` (issue 19): the import graph, read from the source with
``ast``, has no cycle.

What counts as an edge ``a -> b``: ``a`` names module ``b`` in an ``import`` or ``from ... import``
(``from acp_bridge.cli import run_entry`` is an edge to ``acp_bridge.cli`` and to
``acp_bridge.cli.run_entry``; relative imports are resolved). Two graphs are checked:

* **Module level**: the imports run when ``a`` is imported, those under ``if TYPE_CHECKING:``
  included. A type-only import is still a dependency of ``a``'s types: mypy and every reader
  follow it, and ``typing.get_type_hints`` evaluates it at run time. The circle
  ``client/terminal.py`` <-> ``client/terminal_generation.py`` existed only through one.
* **With the lazy imports**: those inside functions too. A lazy import is allowed, to defer a
  cost (the CLI's 150 ms ``--help`` budget, ``run`` spawning its agent before it imports the
  library), but it defers the dependency, it does not remove it: ``cli/run.py`` <->
  ``cli/run_entry.py`` was a circle through one, and an import moved into a function must not
  hide one.

Not edges: a package's ``__init__`` running before its submodules (Python's order of
initialization, not a dependency the submodule chose), and ``importlib.import_module`` of a
string (the package's lazy public names, the CLI's subcommand table): they name their target
at run time, in one direction, from the top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "acp_bridge"

Graph = dict[str, set[str]]


def _modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of ``package`` (packages by name)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(body: list[ast.stmt], *, lazy: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``body``: those run when the module is imported (in ``if``,
    ``try``, ``with`` and class bodies, and under ``TYPE_CHECKING``), and with ``lazy`` those
    inside functions too."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if lazy:
                yield from (n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom))
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    statements = [c for c in children if isinstance(c, ast.stmt)]
                    handlers = [c for c in children if isinstance(c, ast.ExceptHandler)]
                    yield from _import_nodes(statements, lazy=lazy)
                    for handler in handlers:
                        yield from _import_nodes(handler.body, lazy=lazy)


def _named(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name the import statement may refer to as a module."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    parts = [node.module] if node.module else []
    if node.level:  # relative: from the module's package, one level up per extra dot
        package = module.split(".") if is_package else module.split(".")[:-1]
        parts = package[: len(package) - node.level + 1] + parts
    base = ".".join(parts)
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(package: Path, *, lazy: bool) -> Graph:
    """Module -> the package's modules it imports (see the module docstring for what counts)."""
    modules = _modules(package)
    graph: Graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        targets = {
            name
            for node in _import_nodes(tree.body, lazy=lazy)
            for name in _named(node, module, is_package)
            if name in modules and name != module
        }
        graph[module] = targets
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """One circle per strongly connected component of more than one module, as a path that
    starts and ends with the same module (Tarjan's algorithm, then a walk inside the component)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle(graph, component) for component in components]


def _circle(graph: Graph, component: set[str]) -> list[str]:
    """A path from the component's first module back to it, inside the component (breadth
    first, so the shortest)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def _report(found: list[list[str]]) -> str:
    return "import circles: " + "; ".join(" -> ".join(circle) for circle in found)


@pytest.mark.parametrize("lazy", [False, True], ids=["module-level", "with-lazy-imports"])
def test_the_package_has_no_import_circle(lazy: bool) -> None:
    found = cycles(import_graph(PACKAGE, lazy=lazy))
    assert not found, _report(found)


# --- the checker itself, on packages written for the purpose ----------------------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_a_circle_through_a_type_checking_import_is_found_and_named(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg.b import B\n",
            "b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from pkg.a import A\n"
                "B = 1\n"
            ),
        },
    )
    assert cycles(import_graph(package, lazy=False)) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_a_circle_closed_by_a_lazy_import_counts_only_with_the_lazy_imports(
    tmp_path: Path,
) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "entry.py": "def main():\n    from pkg.run import go\n    return go()\n",
            "run.py": "from pkg import entry\n",
        },
    )
    assert cycles(import_graph(package, lazy=False)) == []
    assert cycles(import_graph(package, lazy=True)) == [["pkg.entry", "pkg.run", "pkg.entry"]]


def test_relative_imports_are_resolved_and_the_shortest_circle_is_named(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "from . import c\n",
            "sub/c.py": "from ..d import x\n",
            "d.py": "try:\n    from .sub import c\nexcept ImportError:\n    pass\nx = 1\n",
            "e.py": "import pkg.d\n",
        },
    )
    found = cycles(import_graph(package, lazy=False))
    assert found == [["pkg.d", "pkg.sub.c", "pkg.d"]]
    assert _report(found) == "import circles: pkg.d -> pkg.sub.c -> pkg.d"
