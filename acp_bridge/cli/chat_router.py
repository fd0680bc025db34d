"""Where a chat's input goes: typed lines, Ctrl-C, Ctrl-D and termination signals. Pure.

:class:`ChatRouter` knows only what the chat told it (a turn started or ended, a permission
question is waiting or gone) and turns each input into one action for the chat to perform.

Rules:

* A line starting with ``/`` is a command, always (so ``/cancel`` works while a question
  waits); ``//text`` sends ``/text``. A command of the agent's own (its
  ``available_commands_update``) that is not one of ours is sent as typed, ``/tools ...``: the
  agent runs it. Unknown commands and bad arguments give :class:`Say`.
* Otherwise, while a permission question waits, the line answers the oldest one: ``y``/``yes``
  allow once, ``n``/``no`` reject, ``a``/``always`` allow always; anything else asks again.
  A question of the agent's elicitation (a form field, a url's consent) takes the line as
  typed (:class:`Reply`; ``//text`` replies ``/text``), and Ctrl-C at it dismisses it
  (:class:`Dismiss`: the elicitation is answered ``cancel``), the turn goes on.
* Otherwise a non-blank line is sent (queued behind the running turn, if any). ``/steer TEXT``
  sends TEXT as a steer instead: into the running turn where the agent takes it (else it is
  queued first).
* Ctrl-C while a turn runs and no cancel was asked yet: :class:`Stop` (cancel it, pause the
  queue). Ctrl-C at an idle prompt, or while the cancel is under way: :class:`Quit`. Any
  interrupt once quitting: :class:`QuitNow`. Ctrl-D: :class:`Quit`. SIGTERM/SIGHUP: quit, the
  second one now.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acp_bridge.cli.columns import aligned

__all__ = [
    "HELP_TEXT",
    "Answer",
    "Cancel",
    "ChatRouter",
    "ChooseMode",
    "ChooseModel",
    "Dismiss",
    "Quit",
    "QuitNow",
    "Reply",
    "Resume",
    "Retry",
    "Say",
    "Send",
    "Stop",
]


@dataclass(frozen=True)
class Send:
    text: str
    steer: bool = False
    """Join the running turn, where the agent takes steers (``/steer``)."""


@dataclass(frozen=True)
class Answer:
    question: int
    kind: str  # "allow_once" | "reject_once" | "allow_always"


@dataclass(frozen=True)
class Reply:
    """A line typed at a free-text question (an elicitation's), as typed."""

    question: int
    text: str


@dataclass(frozen=True)
class Dismiss:
    """Ctrl-C at a free-text question: it is answered ``cancel``."""

    question: int


@dataclass(frozen=True)
class Cancel:
    """Cancel the running turn; the queue goes on."""


@dataclass(frozen=True)
class Stop:
    """Cancel the running turn and pause the queue (kept in the store)."""


@dataclass(frozen=True)
class Resume:
    pass


@dataclass(frozen=True)
class Retry:
    seq: int


@dataclass(frozen=True)
class ChooseMode:
    mode_id: str | None  # None: list them


@dataclass(frozen=True)
class ChooseModel:
    model_id: str | None  # None: list them


@dataclass(frozen=True)
class Say:
    text: str


@dataclass(frozen=True)
class Quit:
    interrupted: bool  # left by a signal or while a turn ran (exit 130), else 0


@dataclass(frozen=True)
class QuitNow:
    """Kill the agent's tree at once; record what is open as cancelled without waiting."""


Action = (
    Send | Answer | Reply | Cancel | Stop | Resume | Retry | ChooseMode | ChooseModel | Say | Quit
)
Interrupted = Stop | Quit | QuitNow | Dismiss

HELP_TEXT = """\
commands:
  /cancel      cancel the running turn; queued messages go on
  /steer TEXT  send TEXT into the running turn, where the agent takes it (else it is
               queued first); a line typed without it waits for the turn to end
  /stop        cancel the running turn and pause the queue (kept: /resume sends it,
               and a new message is sent after it)
  /resume      send the paused queue
  /retry N     send message N again (a cancelled, superseded or failed one)
  /mode [ID]   list the agent's modes, or choose one
  /model [ID]  list the agent's models, or choose one
  /quit        cancel the running turn and leave (queued messages stay for --resume)
  /help        this text (and the agent's own commands)
  //text       send "/text" (also reaches an agent command named like one of these)
keys: Ctrl-C cancels the running turn (like /stop); again, or at an idle prompt, leaves.
      Alt-Enter sends the line as a steer (like /steer). Ctrl-D leaves.
      A permission question is answered on the prompt line: y, n or a.
      The agent's questions (a form, a url to open) too; Ctrl-C at one dismisses it."""

_OURS = frozenset(
    ("cancel", "steer", "stop", "resume", "retry", "mode", "model", "quit", "exit", "help")
)

AgentCommands = Callable[[], Sequence[Mapping[str, Any]]]
"""The agent's slash commands as it last listed them (``availableCommands`` entries)."""


def _no_commands() -> Sequence[Mapping[str, Any]]:
    return ()


def command_names(commands: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each well-formed command's name (without its ``/``) and its description with the
    input hint, in the agent's order."""
    named: dict[str, str] = {}
    for command in commands:
        name = command.get("name")
        if not isinstance(name, str) or not name.strip("/ ") or " " in name.strip("/ "):
            continue
        description = command.get("description")
        text = description.strip() if isinstance(description, str) else ""
        hint = command.get("input")
        if isinstance(hint, Mapping) and isinstance(hint.get("hint"), str):
            text = f"{text} (input: {hint['hint']})" if text else f"input: {hint['hint']}"
        named.setdefault(name.strip("/ "), " ".join(text.split()))
    return named


def help_text(commands: Sequence[Mapping[str, Any]]) -> str:
    """/help: ours, then the agent's own commands (sent to it as typed)."""
    named = command_names(commands)
    if not named:
        return HELP_TEXT
    lines = aligned([(f"/{name}", text) for name, text in named.items()], indent="  ")
    hidden = sorted(name for name in named if name in _OURS)
    note = [f"  (//{name} reaches the agent's /{name})" for name in hidden]
    return "\n".join(
        [HELP_TEXT, "the agent's commands (sent to it as you type them):", *lines, *note]
    )


_ANSWERS = {
    "y": "allow_once",
    "yes": "allow_once",
    "n": "reject_once",
    "no": "reject_once",
    "a": "allow_always",
    "always": "allow_always",
}


class ChatRouter:
    def __init__(self, agent_commands: AgentCommands = _no_commands) -> None:
        self._agent_commands = agent_commands
        self.turn_running = False
        self.cancel_asked = False
        self.quitting = False
        self._questions: deque[int] = deque()
        self._free_text: set[int] = set()

    # -- what the chat tells it --------------------------------------------------------

    def turn_started(self) -> None:
        self.turn_running = True
        self.cancel_asked = False

    def turn_ended(self) -> None:
        self.turn_running = False
        self.cancel_asked = False

    def question_asked(self, question: int, *, free_text: bool = False) -> None:
        """A question waits; ``free_text``: any line answers it (an elicitation's)."""
        self._questions.append(question)
        if free_text:
            self._free_text.add(question)

    def question_gone(self, question: int) -> None:
        if question in self._questions:
            self._questions.remove(question)
        self._free_text.discard(question)

    @property
    def free_text_question(self) -> int | None:
        """The question the next line goes to, when it takes any text."""
        question = self.question
        return question if question in self._free_text else None

    @property
    def question(self) -> int | None:
        """The question the next answer goes to: the oldest one waiting."""
        return self._questions[0] if self._questions else None

    # -- inputs --------------------------------------------------------------------------

    def line(self, text: str) -> Action | None:
        stripped = text.strip()
        free = self.free_text_question
        if free is not None and not (stripped.startswith("/") and not stripped.startswith("//")):
            return Reply(free, text.lstrip()[1:] if stripped.startswith("//") else text)
        if stripped.startswith("//"):
            return Send(text.lstrip()[1:])
        if stripped.startswith("/"):
            return self._command(stripped)
        if self._questions:
            kind = _ANSWERS.get(stripped.lower())
            if kind is None:
                return Say("answer y (allow once), n (reject) or a (always allow)")
            return Answer(self._questions[0], kind)
        if not stripped:
            return None
        return Send(text)

    def interrupt(self) -> Interrupted:
        """Ctrl-C."""
        if self.quitting:
            return QuitNow()
        free = self.free_text_question
        if free is not None:
            return Dismiss(free)
        if self.turn_running and not self.cancel_asked:
            self.cancel_asked = True
            return Stop()
        self.quitting = True
        return Quit(interrupted=self.turn_running)

    def terminate(self) -> Quit | QuitNow:
        """SIGTERM or SIGHUP: leave (a second one: now)."""
        if self.quitting:
            return QuitNow()
        self.quitting = True
        return Quit(interrupted=True)

    def end_of_input(self) -> Quit:
        """Ctrl-D (or the terminal went away)."""
        self.quitting = True
        return Quit(interrupted=False)

    def _command(self, stripped: str) -> Action:
        name, _, rest = stripped[1:].partition(" ")
        arg = rest.strip() or None
        if name == "cancel":
            if not self.turn_running:
                return Say("no turn is running")
            self.cancel_asked = True
            return Cancel()
        if name == "steer":
            if arg is None:
                return Say("usage: /steer TEXT (sent into the running turn)")
            return Send(arg, steer=True)
        if name == "stop":
            if self.turn_running:
                self.cancel_asked = True
            return Stop()
        if name == "resume":
            return Resume()
        if name == "retry":
            if arg is None or not arg.isdigit():
                return Say("usage: /retry N (a message number, as shown when it was queued)")
            return Retry(int(arg))
        if name == "mode":
            return ChooseMode(arg)
        if name == "model":
            return ChooseModel(arg)
        if name in ("quit", "exit"):
            self.quitting = True
            return Quit(interrupted=False)
        if name == "help":
            return Say(help_text(self._agent_commands()))
        if name in command_names(self._agent_commands()):
            return Send(stripped)  # the agent's own command: it runs the prompt "/name ..."
        return Say(f"unknown command /{name}; /help lists them")
