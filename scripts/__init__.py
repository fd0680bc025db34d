"""The project's own programs, by job; none of them is part of the ``acp_bridge`` package.

- ``bench/``: every benchmark and the budgets of design.md judged on them
  (``python scripts/bench.py``; one suite alone: ``python -m scripts.bench.rpc`` and so on).
- ``soak/``: a bounded soak of real processes, then its invariants (``python scripts/soak.py``).
- ``interop/``: the interop matrix against third-party ACP software (``python scripts/interop.py``).
- ``common.py``: what all three share (the checkout, its commit, the machine, a child process
  on this checkout, a doc section rewritten in place).
- ``mutation_pass.py``: the hand-picked mutants and the tests that must kill each one.

``bench.py``, ``soak.py`` and ``interop.py`` are entry points of a few lines: they put the
checkout first on ``sys.path`` and call their package's ``main``. Inside the packages every
import is absolute (``from scripts.bench import budgets``), and tests/unit/test_script_imports.py
keeps the import graph free of circles.
"""
