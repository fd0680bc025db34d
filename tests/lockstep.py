"""Several threads doing the same thing to the same new files at the same moment."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path


def open_in_lockstep(
    open_one: Callable[[Path], None], paths: list[Path], *, openers: int = 4
) -> list[BaseException]:
    """``openers`` threads call ``open_one`` on each path in turn, all released together on
    each path (a barrier); what they raised, in no order."""
    start = threading.Barrier(openers)
    failures: list[BaseException] = []

    def open_each() -> None:
        for path in paths:
            start.wait()
            try:
                open_one(path)
            except Exception as exc:
                failures.append(exc)

    workers = [threading.Thread(target=open_each) for _ in range(openers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failures
