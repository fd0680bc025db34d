"""The interop matrix: acp-bridge against real third-party ACP software, offline
(``python scripts/interop.py``; :mod:`scripts.interop.main` says what runs).

- :mod:`main`: what can run here, the cells, the results;
- :mod:`paths`: the client paths (the columns) and one cell's checks;
- :mod:`cli`: the ``acp-bridge run`` path's scenario;
- :mod:`peers`: the third-party software (the rows): pinned versions, installs, agents;
- :mod:`report`: the matrix as text and as docs/interop.md.
"""
