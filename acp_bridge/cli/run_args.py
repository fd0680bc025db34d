"""The ``run`` subcommand's arguments. Light on purpose: ``acp-bridge --help`` builds every
subcommand's parser, so nothing here imports the library."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Final

from acp_bridge.cli.conversation_args import add_conversation_options, add_supervision_options
from acp_bridge.cli.exit_codes import HELP
from acp_bridge.cli.named_agents import add_agent_options
from acp_bridge.cli.options import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OneLineParser,
    byte_count,
)

__all__ = ["JSON_EVENTS", "register"]

JSON_EVENTS: Final = (
    "agent_started",
    "session",
    "queued",
    "turn_started",
    "update",
    "permission",
    "tool_call_closed",
    "turn_ended",
    "turn_failed",
    "steered",
    "steer_fallback",
    "agent_exited",
    "agent_restarted",
    "session_restored",
    "session_replaced",
    "agent_gave_up",
    "conversation_closed",
    "error",
)
"""Every kind of event ``run --json`` prints, in about the order a run shows them (for
``--help``; tests/e2e/test_run_command_line.py checks it against the kinds the code emits)."""


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    run = commands.add_parser(
        "run",
        help="run turns headless: -m TEXT (repeatable) or one message per stdin line",
        usage="acp-bridge run [OPTIONS] (--agent NAME | -- AGENT_CMD [ARGS...])",
        description=(
            "Start AGENT_CMD as a supervised ACP agent and prompt it with each message, in "
            "order, one turn each. Messages come from -m (repeatable) or, without -m, from "
            "stdin, one per line; a line read while a turn runs waits for it. Every message is "
            "stored (--store) before it is prompted, so a conversation survives a crash of the "
            "bridge itself (--resume). The agent's text goes to stdout (or NDJSON events with "
            "--json); progress and logs go to stderr."
        ),
        epilog=(
            f'{HELP} --json events: {", ".join(JSON_EVENTS)} (each with "event" and "ts"; '
            "error when the agent could not be started, initialized or authenticated)."
        ),
    )
    run.add_argument(
        "-m",
        "--message",
        action="append",
        default=[],
        metavar="TEXT",
        help="a message to send (repeatable, sent in order); without -m, read stdin lines",
    )
    add_conversation_options(run)
    run.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume or --conversation: send the conversation's failed recoverable "
        "messages again, in order, before the new ones",
    )
    add_supervision_options(run)
    run.add_argument(
        "--permission",
        choices=["ask", "deny", "allow-reads", "allow-all"],
        help="how to answer the agent's permission requests (default: ask on a terminal, "
        "deny otherwise)",
    )
    run.add_argument(
        "--max-message-bytes",
        type=byte_count,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="N",
        help="refuse a message longer than N bytes of UTF-8 (default: 16 MiB)",
    )
    run.add_argument("--json", action="store_true", help="print NDJSON events on stdout")
    run.add_argument(
        "--record",
        metavar="FILE",
        help="append the JSON-RPC traffic between the bridge and the agent to FILE, one message "
        "a line with time and direction, as proxy --record does (a regular file, never through "
        "a symbolic link, created 0600; replay it with acp-bridge replay FILE). A failed write "
        "stops the recording, never the run",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log to stderr, with the agent's own stderr (-vv for debug)",
    )
    add_agent_options(run)  # --agent NAME, --config, --registry, --mcp NAME=COMMAND [ARGS...]
    run.add_argument(
        "agent_cmd",
        nargs=argparse.REMAINDER,
        action=_AgentCommand,
        metavar="-- AGENT_CMD [ARGS...]",
        help="the agent command line, after --",
    )
    run.set_defaults(handler="acp_bridge.cli.run_entry:run_command")


class _AgentCommand(argparse.Action):
    """Stores the agent command; refuses one that came without ``--`` when no ``-m`` was given.

    Everything after the first word that is not an option of ``run`` is the agent's, so
    ``acp-bridge run my-agent -m hi`` gives ``-m hi`` to the agent: nothing would be prompted
    (stdin has no lines in a script), an empty conversation would be stored, and the run would
    exit 0. With no ``-m`` and no ``--`` the command line is refused, showing the right form."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        words = [str(word) for word in values or []]
        if words and words[0] != "--" and not namespace.message:
            parser.error(_without_separator(words, getattr(namespace, "agent", None)))
        setattr(namespace, self.dest, words)


def _without_separator(words: list[str], agent: str | None) -> str:
    """The usage error for ``run AGENT_CMD...`` given without ``--`` and without ``-m``
    (``agent``: the ``--agent NAME`` given before the words, which were then meant as text)."""
    import shlex  # here: only an error needs it (``--help`` has a startup budget)

    if agent:
        name, text = shlex.quote(agent), shlex.quote(" ".join(words))
        right = f"acp-bridge run [OPTIONS] --agent {name} -m {text}"
        return f"a message is given with -m; write {right}"
    messages: list[str] = []
    command: list[str] = []
    rest = iter(words)
    for word in rest:
        if word in ("-m", "--message"):
            messages += ["-m", next(rest, "TEXT")]
        elif word.startswith("--message="):
            messages += ["-m", word.partition("=")[2]]
        else:
            command.append(word)
    given = shlex.join(messages or ["-m", "TEXT"])
    right = f"acp-bridge run [OPTIONS] {given} -- {shlex.join(command)}"
    if messages:
        return f"-m came after the agent command, so the agent would get it; write {right}"
    return (
        f"the agent command needs -- before it; write {right} (or, without -m, one message per "
        "stdin line)"
    )
