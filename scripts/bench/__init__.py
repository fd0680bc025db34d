"""Every benchmark of acp-bridge, and design.md's budgets judged on what they measured.

``python scripts/bench.py`` runs them all (:mod:`scripts.bench.main`); each suite also runs
alone from the checkout, e.g. ``python -m scripts.bench.rpc --write docs/benchmarks.md``.

- :mod:`main`: the plan, the steps (each comparison interleaved, run by run) and the run.
- :mod:`budgets`: the budgets as a table, judged on the raw samples (pure).
- :mod:`summary`: the report at the top of docs/benchmarks.md (pure but for its write).
- :mod:`sections`: the per-suite sections a full run rewrites.
- the suites: :mod:`rpc`, :mod:`client`, :mod:`turns`, :mod:`floods`, :mod:`growth`,
  :mod:`proxy`, :mod:`oneshot`, :mod:`agent`.
"""
