"""A bounded soak of acp-bridge against real processes, then its invariants:
``python scripts/soak.py`` (:mod:`scripts.soak.main` says what runs and what is checked).

Modules, each importing only those below it:

- :mod:`main`: the run, the report, the exit code;
- :mod:`runs`, :mod:`editor`, :mod:`probes`: the parts that run at once (``acp-bridge run``
  conversations, an editor on ``acp-bridge proxy``, the start-up signal probes);
- :mod:`state`: the one :class:`~scripts.soak.state.Soak` every part works on;
- :mod:`checks`: the ledger and the invariants (no soak module below it);
- :mod:`library`: the library loop, a process of its own (``python -m scripts.soak.library``).
"""
