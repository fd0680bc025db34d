"""The ``acp-bridge`` program (and ``python -m acp_bridge``): its first lines.

They hold ``run``'s stopping signals (see :mod:`.early_signals`) before the command line is
imported, which takes a good part of the first 50 ms: a signal in that time used to kill
``run`` by the signal instead of ending it with exit 130 (issue 21).
"""

from __future__ import annotations

import sys
from typing import NoReturn

from acp_bridge.cli.early_signals import hold_if_run

__all__ = ["entry"]


def entry() -> NoReturn:
    hold_if_run(sys.argv[1:])
    from acp_bridge.cli.main import entry as main_entry

    main_entry()
