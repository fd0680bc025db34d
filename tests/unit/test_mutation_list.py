"""Every mutant of scripts/mutation_pass.py still matches its code exactly once, and names test
files that exist: code that moves must take its mutants along (two had gone stale unnoticed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mutants() -> list[object]:
    path = ROOT / "scripts" / "mutation_pass.py"
    spec = importlib.util.spec_from_file_location("mutation_pass", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_pass", module)
    spec.loader.exec_module(module)
    return list(module.MUTANTS)


@pytest.mark.parametrize("mutant", _mutants(), ids=lambda m: m.name)  # type: ignore[attr-defined]
def test_the_mutant_matches_once_and_its_tests_exist(mutant: object) -> None:
    path = ROOT / mutant.path  # type: ignore[attr-defined]
    assert path.read_text().count(mutant.old) == 1  # type: ignore[attr-defined]
    for test in mutant.tests:  # type: ignore[attr-defined]
        assert (ROOT / test.split("::")[0]).exists(), test
