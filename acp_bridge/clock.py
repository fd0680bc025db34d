"""The running event loop's clock, read without anyio's per-call backend lookup.

Every deadline in the library reads the event loop's clock, the one ``anyio.current_time()``
reads, so a mock clock drives grace, settle and restart delays in tests. ``anyio.current_time()``
finds the backend anew on every call (six calls on the hot path of a turn's end, where each
call costs several times its warm price after an idle wait). :func:`loop_clock` does that lookup
once and returns the very function anyio would end up calling.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

import anyio

__all__ = ["loop_clock"]


def loop_clock() -> Callable[[], float]:
    """A function returning ``anyio.current_time()`` for the event loop running now: asyncio's
    ``loop.time``, trio's ``trio.current_time`` (a trio mock clock included), or anyio's own
    lookup on any other backend. Valid only inside the run it was taken in."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:
        pass  # not asyncio
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.current_time()
        except RuntimeError:
            pass  # trio is imported, but this is not its run
        else:
            clock: Callable[[], float] = trio.current_time
            return clock
    return anyio.current_time
