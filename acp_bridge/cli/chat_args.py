"""The ``chat`` subcommand's arguments. Light on purpose: ``acp-bridge --help`` builds every
subcommand's parser, so nothing here imports the library."""

from __future__ import annotations

import argparse

from acp_bridge.cli.conversation_args import add_conversation_options, add_supervision_options
from acp_bridge.cli.exit_codes import HELP
from acp_bridge.cli.named_agents import add_agent_options
from acp_bridge.cli.options import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OneLineParser,
    byte_count,
)

__all__ = ["register"]

_COMMANDS = (
    "In the chat: /cancel cancels the running turn (the queue goes on); /stop cancels it and "
    "pauses the queue (kept, sent by /resume or after a new message); /retry N; /mode [ID] and "
    "/model [ID] list or choose the agent's modes and models; /quit; /help. Ctrl-C cancels the "
    "running turn (like /stop); Ctrl-C again, Ctrl-C at an idle prompt, or Ctrl-D leaves. "
    "Exit codes: 0 left with /quit, Ctrl-D or Ctrl-C at an idle prompt; 130 left by a signal "
    "or while a turn was running; 3 the agent could not start, initialize or authenticate; "
    "2 usage (stdin must be a terminal)."
)


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    chat = commands.add_parser(
        "chat",
        help="chat with an agent on this terminal; Ctrl-C cancels the running turn, twice leaves",
        usage="acp-bridge chat [OPTIONS] (--agent NAME | -- AGENT_CMD [ARGS...])",
        description=(
            "Start AGENT_CMD as a supervised ACP agent and chat with it: each line you type is "
            "a message (stored before it is sent, like run). The agent's text streams to "
            "stdout; while it works, a status line on stderr shows the time and the queue. A "
            "line typed during a turn is queued. Permission requests are asked on the prompt "
            "line: y (allow once), n (reject), a (always allow). History is kept in "
            "$XDG_STATE_HOME/acp-bridge/chat_history (1000 lines)."
        ),
        epilog=_COMMANDS + " " + HELP,
    )
    add_conversation_options(chat)
    add_supervision_options(chat)
    chat.add_argument(
        "--permission",
        choices=["ask", "deny", "allow-reads", "allow-all"],
        default="ask",
        help="how to answer the agent's permission requests (default: ask, on the prompt line)",
    )
    chat.add_argument(
        "--max-message-bytes",
        type=byte_count,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="N",
        help="refuse a line longer than N bytes of UTF-8 (default: 16 MiB)",
    )
    chat.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log to stderr, with the agent's own stderr (-vv for debug)",
    )
    add_agent_options(chat)  # --agent NAME, --config, --registry, --mcp NAME=COMMAND [ARGS...]
    chat.add_argument(
        "agent_cmd",
        nargs=argparse.REMAINDER,
        metavar="-- AGENT_CMD [ARGS...]",
        help="the agent command line, after --",
    )
    chat.set_defaults(handler="acp_bridge.cli.chat_cmd:chat_command")
