"""The public API (issue 19): ``acp_bridge`` exports what the public signatures and the README's
examples need, every name it lists resolves to the object its one home defines, and importing
it stays cheap."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import acp_bridge

ROOT = Path(__file__).resolve().parents[2]


def _exports() -> dict[str, str]:
    exports: dict[str, str] = vars(acp_bridge)["_EXPORTS"]
    return exports


@pytest.mark.parametrize("name", acp_bridge.__all__)
def test_every_name_in_all_resolves(name: str) -> None:
    value = getattr(acp_bridge, name)
    if name == "__version__":
        assert isinstance(value, str)
        return
    home = _exports()[name]
    assert value is getattr(sys.modules[home], name)
    # Its one home: where it is defined, not a module that re-exports it.
    assert getattr(value, "__module__", home) == home, f"{name} is defined elsewhere"


def test_all_the_lazy_names_and_what_type_checkers_see_agree() -> None:
    """``__all__``, the lazy table and the ``TYPE_CHECKING`` imports list the same names, each
    from the same module."""
    assert list(acp_bridge.__all__) == ["__version__", *_exports()]
    tree = ast.parse(Path(acp_bridge.__file__).read_text())
    seen: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                seen.update({alias.name: statement.module for alias in statement.names})
    assert seen == _exports()


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = acp_bridge.Nope


def test_importing_the_package_loads_nothing_but_its_version() -> None:
    code = (
        "import sys, acp_bridge\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('acp_bridge', 'anyio', 'trio', 'pydantic', 'litellm', 'acp', 'sqlite3')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "['acp_bridge', 'acp_bridge.version']"


def _classes(annotation: Any) -> set[type]:
    """The classes an annotation names, generics and unions unpacked (``AsyncIterator[X]``,
    ``X | None``, ``Callable[[], float]``...)."""
    found: set[type] = set()
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and origin is None:
        found.add(annotation)
    for argument in typing.get_args(annotation):
        if isinstance(argument, list):  # a Callable's parameters
            for each in argument:
                found |= _classes(each)
        else:
            found |= _classes(argument)
    return found


@pytest.mark.parametrize(
    "function",
    [acp_bridge.open_supervised_agent, acp_bridge.open_conversation],
    ids=lambda f: f.__name__,
)
def test_every_type_in_an_opening_signature_is_exported(function: Callable[..., Any]) -> None:
    hints = typing.get_type_hints(inspect.unwrap(function))
    assert "return" in hints and len(hints) == len(inspect.signature(function).parameters) + 1
    classes = {cls for hint in hints.values() for cls in _classes(hint)}
    ours = {cls for cls in classes if cls.__module__.startswith("acp_bridge")}
    assert ours  # at least the yielded object
    missing = [cls for cls in ours if getattr(acp_bridge, cls.__name__, None) is not cls]
    names = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in missing)
    assert not missing, f"{function.__name__} uses types acp_bridge does not export: {names}"


def test_every_name_the_readme_imports_from_the_package_is_exported() -> None:
    readme = (ROOT / "README.md").read_text()
    imported: set[str] = set()
    for block in re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module == "acp_bridge":
                imported.update(alias.name for alias in node.names)
    assert imported  # the README has examples
    assert imported <= set(acp_bridge.__all__), imported - set(acp_bridge.__all__)
