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

from pathlib import Path

import pytest

from tests.import_graph import cycles, import_graph, module_name

PACKAGE = Path(__file__).resolve().parents[2] / "acp_bridge"


def circles(package: Path, *, lazy: bool) -> list[list[str]]:
    """The package's import circles (see the module docstring for what counts), by module name."""
    graph = import_graph(package, lazy=lazy, type_checking=True)
    return [[module_name(path, package) for path in circle] for circle in cycles(graph)]


def _report(found: list[list[str]]) -> str:
    return "import circles: " + "; ".join(" -> ".join(circle) for circle in found)


@pytest.mark.parametrize("lazy", [False, True], ids=["module-level", "with-lazy-imports"])
def test_the_package_has_no_import_circle(lazy: bool) -> None:
    found = circles(PACKAGE, lazy=lazy)
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
    assert circles(package, lazy=False) == [["pkg.a", "pkg.b", "pkg.a"]]


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
    assert circles(package, lazy=False) == []
    assert circles(package, lazy=True) == [["pkg.entry", "pkg.run", "pkg.entry"]]


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
    found = circles(package, lazy=False)
    assert found == [["pkg.d", "pkg.sub.c", "pkg.d"]]
    assert _report(found) == "import circles: pkg.d -> pkg.sub.c -> pkg.d"


def test_type_only_imports_can_be_left_out_and_the_component_s_shortest_circle_is_named(
    tmp_path: Path,
) -> None:
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "import typing\nif typing.TYPE_CHECKING:\n    from pkg import c\n",
            "c.py": "from pkg import a, d\n",
            "d.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    pass\nelse:\n    from pkg import c\n",
        },
    )
    # a -> b -> c -> a goes through the first module; c <-> d is shorter.
    assert circles(package, lazy=False) == [["pkg.c", "pkg.d", "pkg.c"]]
    # Without type-only imports b imports nothing; the ``else`` of TYPE_CHECKING still runs.
    with_types = import_graph(package, lazy=False, type_checking=True)
    without = import_graph(package, lazy=False, type_checking=False)
    init, c = package / "__init__.py", package / "c.py"
    assert (with_types[package / "b.py"], without[package / "b.py"]) == ({init, c}, set())
    assert without[package / "d.py"] == with_types[package / "d.py"] == {init, c}
