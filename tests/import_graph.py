"""The import graph of a tree of Python modules, read from the source with ``ast``, and the
circles in it. One implementation for every "no import circles" check (issue 19): the package's
(tests/unit/test_import_cycles.py) and the scripts' (tests/unit/test_script_imports.py); each
test says which imports count for its tree, and why.

A node is a file: a module's ``.py`` or a package's ``__init__.py``. A file, not a dotted name,
because two files can answer to one name (scripts/soak.py beside the package scripts/soak/), and
the one Python does not load must still be a node with its own imports.

An edge ``a -> b``: ``a`` names ``b`` in an ``import`` or ``from ... import`` statement.

* ``import x.y`` names ``x.y``; ``from x import y`` names ``x`` and ``x.y``, since ``y`` may be a
  submodule. A parent package is not named: its ``__init__`` running first is Python's order of
  initialization, not a dependency the importer chose.
* A relative import is made absolute from the file's package, its dotted path below the
  directory that holds ``top``.
* A name is looked up the way Python finds it: in each directory of ``sys_path`` in turn, a
  package (``x/y/__init__.py``) before a module (``x/y.py``). Only files under ``top`` are nodes;
  an import that finds nothing there, or finds the importer itself, is no edge.
* Which statements count is the caller's choice: those that run when the module is imported
  (at module level, in ``if``, ``try``, ``with``, loops and class bodies) always; with ``lazy``
  those inside functions too; with ``type_checking`` those under ``if TYPE_CHECKING:``.
* ``importlib.import_module("x")`` names its target in a string at run time: no edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

Graph = dict[Path, set[Path]]


@dataclass(frozen=True)
class _Import:
    statement: ast.Import | ast.ImportFrom
    lazy: bool  # inside a function: it runs when the function is called
    type_only: bool  # under ``if TYPE_CHECKING:``: it runs for type checkers only


def import_graph(
    top: Path, *, lazy: bool, type_checking: bool, sys_path: Sequence[Path] = ()
) -> Graph:
    """Every ``.py`` file under the directory ``top`` -> the files under it that it imports.

    ``lazy``: imports inside functions count. ``type_checking``: imports under
    ``if TYPE_CHECKING:`` count. ``sys_path``: where names are looked up, in order; by default
    the directory that holds ``top``, so ``top``'s modules are found by their full dotted names.
    """
    search = tuple(sys_path) or (top.parent,)
    graph: Graph = {}
    for path in sorted(top.rglob("*.py")):
        package = _package(path, top)
        targets = set()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for found in _imports(tree.body):
            if (found.lazy and not lazy) or (found.type_only and not type_checking):
                continue
            for name in _names(found.statement, package):
                target = _find(name, search)
                if target is not None and target.is_relative_to(top) and target != path:
                    targets.add(target)
        graph[path] = targets
    return graph


def module_name(path: Path, top: Path) -> str:
    """The dotted name of the file ``path`` under the package directory ``top``
    (``pkg/sub/__init__.py`` is ``pkg.sub``)."""
    parts = path.relative_to(top.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def cycles(graph: Graph) -> list[list[Path]]:
    """One circle per strongly connected component of more than one file (Tarjan's algorithm),
    as a path that starts and ends with the same file: the component's shortest circle, so a
    message names a real chain of imports and the fewest of them."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    found: list[list[Path]] = []

    def visit(node: Path) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(_shortest_circle(graph, component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _shortest_circle(graph: Graph, component: set[Path]) -> list[Path]:
    """The shortest circle inside a strongly connected component; of equal ones, the one that
    starts with the component's first file."""
    circles = (_circle_through(graph, component, start) for start in sorted(component))
    return min(circles, key=len)  # min keeps the first of equal lengths


def _circle_through(graph: Graph, component: set[Path], start: Path) -> list[Path]:
    """The shortest way from ``start`` back to it inside the component (breadth first)."""
    came_from: dict[Path, Path] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, set()) & component):
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


def _imports(
    nodes: Iterable[ast.AST], *, lazy: bool = False, type_only: bool = False
) -> Iterator[_Import]:
    """Every import statement in or below ``nodes``, with where it stands."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield _Import(node, lazy=lazy, type_only=type_only)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _imports(node.body, lazy=True, type_only=type_only)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.body, lazy=lazy, type_only=True)
            # The ``else`` runs when the program does.
            yield from _imports(node.orelse, lazy=lazy, type_only=type_only)
        else:
            yield from _imports(ast.iter_child_nodes(node), lazy=lazy, type_only=type_only)


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _package(path: Path, top: Path) -> str:
    """The dotted package the file belongs to: a package's ``__init__`` is its own."""
    name = module_name(path, top)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _names(statement: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    """Every dotted name the statement may refer to as a module, relative ones made absolute."""
    if isinstance(statement, ast.Import):
        yield from (alias.name for alias in statement.names)
        return
    parts = [statement.module] if statement.module else []
    if statement.level:  # from the file's package, one package up per dot after the first
        package_parts = package.split(".")
        kept = len(package_parts) - statement.level + 1
        if kept < 1:  # above the top package: Python refuses it
            return
        parts = package_parts[:kept] + parts
    base = ".".join(parts)
    yield base
    yield from (f"{base}.{alias.name}" for alias in statement.names)


def _find(name: str, sys_path: Sequence[Path]) -> Path | None:
    """The file Python loads for ``name``: the first directory that has it, a package first."""
    for directory in sys_path:
        path = directory.joinpath(*name.split("."))
        for candidate in (path / "__init__.py", path.with_suffix(".py")):
            if candidate.is_file():
                return candidate
    return None
