"""Holding a store call open in a worker thread, now that commits usually run on the loop.

A group commit runs a batch at once on the event loop's thread when it can, and falls back to
a worker thread when a call fails. A gated store call (one that blocks on a threading.Event to
hold a commit open) calls :func:`leave_the_event_loop` first: on the loop's thread it refuses,
which is a failure, so its batch is rolled back and runs again in a worker thread, where the
gate may block without blocking the loop.
"""

from __future__ import annotations

import sniffio

__all__ = ["OnTheEventLoop", "leave_the_event_loop"]


class OnTheEventLoop(Exception):
    """A gated store call asked to run on the event loop's thread."""


def leave_the_event_loop() -> None:
    """Raise :class:`OnTheEventLoop` when called on an event loop's thread."""
    try:
        sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return  # a worker thread
    raise OnTheEventLoop
