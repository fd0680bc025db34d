"""The ``chat`` subcommand's arguments. Light on purpose: ``acp-bridge --help`` builds every
subcommand's parser, so nothing here imports the library."""

from __future__ import annotations

import argparse

from acp_bridge.cli.exit_codes import HELP
from acp_bridge.cli.named_agents import add_agent_options
from acp_bridge.cli.options import (
    DEFAULT_MAX_MESSAGE_BYTES,
    OneLineParser,
    byte_count,
    count,
    directory,
    positive_seconds,
    seconds,
    timeout_or_off,
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
    chat.add_argument(
        "--cwd",
        type=directory,
        metavar="DIR",
        help="the session's working directory, which must exist (default: .)",
    )
    chat.add_argument(
        "--session-id",
        metavar="ID",
        help="restore this agent session (session/load or resume); one the agent can't "
        "restore is an error (exit 3)",
    )
    chat.add_argument(
        "--store",
        metavar="PATH",
        help="the SQLite store of conversations (default: $XDG_STATE_HOME/acp-bridge/store.db)",
    )
    which = chat.add_mutually_exclusive_group()
    which.add_argument(
        "--conversation",
        metavar="ID",
        help="continue the stored conversation ID (exit 2 while another process runs it)",
    )
    which.add_argument(
        "--resume",
        action="store_true",
        help="continue the most recent stored conversation of this cwd and agent command whose "
        "agent started; its queued messages are sent first",
    )
    chat.add_argument(
        "--startup-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long the agent gets to answer initialize (default: 30)",
    )
    chat.add_argument(
        "--auth-method",
        metavar="ID",
        help="call authenticate with this method id after initialize",
    )
    chat.add_argument(
        "--grace",
        type=seconds,
        default=5.0,
        metavar="SECONDS",
        help="after a cancel, how long the agent gets to answer before it is replaced (default: 5)",
    )
    chat.add_argument(
        "--turn-timeout",
        type=timeout_or_off,
        metavar="SECONDS",
        help="cancel a turn that runs longer (0 = off, the default)",
    )
    chat.add_argument(
        "--idle-timeout",
        type=timeout_or_off,
        metavar="SECONDS",
        help="cancel a turn when the agent sends nothing for this long (0 = off, the default)",
    )
    chat.add_argument(
        "--max-restarts",
        type=count,
        default=5,
        metavar="N",
        help="restarts allowed within 5 minutes before giving up (default: 5)",
    )
    chat.add_argument(
        "--permission",
        choices=["ask", "deny", "allow-reads", "allow-all"],
        default="ask",
        help="how to answer the agent's permission requests (default: ask, on the prompt line)",
    )
    chat.add_argument(
        "--allow-fs",
        action="store_true",
        help="let the agent read and write files inside the session roots",
    )
    chat.add_argument(
        "--allow-terminal",
        action="store_true",
        help="let the agent run commands (terminal/*) in the session cwd",
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
