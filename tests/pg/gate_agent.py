"""A fake agent for the shared-store tests: the echo agent (``fixtures/agents``) plus two steps.

- ``log``: appends ``<pid> <prompt text>`` as one line to the file of ``--prompt-log FILE``
  (when given), as the prompt arrives: the soak counts the prompts every agent received.
- ``gate PATH``: waits until another process opens the FIFO ``PATH`` for writing (an event,
  not a sleep): a test holds a turn open while it does something to the host, then lets it go.
- ``ready PATH``: writes one byte into the FIFO ``PATH`` (once the test opened it for
  reading): the test so learns that the turn got here.

Default program: ``log; echo``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "agents"))

from fakeacp import Config, main
from fakeacp.steps import ACTIONS

_PROMPT_LOG: list[str] = []


def action_log(agent: object, turn: object, arg: str) -> None:
    for path in _PROMPT_LOG:
        text = " ".join(str(getattr(turn, "text", "")).split())
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()} {text}\n")


def action_gate(agent: object, turn: object, arg: str) -> None:
    with open(arg.strip(), "rb"):  # blocks until a writer opens the FIFO
        pass


def action_ready(agent: object, turn: object, arg: str) -> None:
    with open(arg.strip(), "wb") as fifo:  # blocks until a reader opens the FIFO
        fifo.write(b"r")


if __name__ == "__main__":
    if "--prompt-log" in sys.argv:
        at = sys.argv.index("--prompt-log")
        _PROMPT_LOG.append(sys.argv[at + 1])
        del sys.argv[at : at + 2]
    ACTIONS["log"] = action_log
    ACTIONS["gate"] = action_gate
    ACTIONS["ready"] = action_ready
    main(Config(name="gate-agent", description="gate agent", steps="log; echo"))
