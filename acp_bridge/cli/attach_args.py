"""The ``attach`` subcommand's arguments (light: nothing here imports the library)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser, positive_seconds
from acp_bridge.cli.verb_args import add_endpoint_options, add_verbose

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    attach = commands.add_parser(
        "attach",
        help="an editor's agent command: ACP on stdio, relayed to the conversation host",
        usage="acp-bridge attach [OPTIONS] [--agent NAME | -- AGENT_CMD]",
        description=(
            "Configure this as the agent command in your editor. It relays ACP between the "
            "editor (stdin/stdout) and the conversation host, line for line, so the "
            "conversation outlives the editor: closing the editor detaches, and an editor that "
            "restarts and loads its session gets the same conversation, with the agent still "
            "running and what it missed replayed. When no host answers on --socket, attach "
            "starts one (acp-bridge serve --exit-when-idle, detached, its log beside the "
            "socket) and waits for it, with progress on stderr. The agent is --agent NAME or "
            "the command after --, passed to the host with each new session "
            "(_meta.acpBridge on session/new) and to a host it starts; without either, the "
            "host's default agent. With --host URL, a remote host over WebSocket "
            "(--token-file holds its bearer token, as serve --listen made it; --ca-file "
            "trusts a host whose certificate is of its own making); nothing is started then. "
            "When the host's connection drops, attach exits with one line on stderr (the "
            "editor restarts it, and its session/load gets the conversation back)."
        ),
        epilog=(
            "Exit codes: 0 the editor closed stdin (detached; the conversation goes on); 2 "
            "usage error (a bad option, a socket directory or socket you may not use, a host "
            "that serves another store, a token file that cannot be used, a remote host that "
            "refused the token); 3 no host could be reached or started, or the host "
            "closed the connection; 130 interrupted."
        ),
    )
    attach.add_argument(
        "--agent",
        metavar="NAME",
        help="a named agent for new sessions (acp-bridge agents), instead of -- CMD",
    )
    attach.add_argument(
        "--host",
        metavar="URL",
        help="a remote host (ws:// or wss://) instead of the local socket",
    )
    attach.add_argument(
        "--token-file",
        metavar="FILE",
        help="the file holding the remote host's bearer token (with --host): a private "
        "file (0600) of yours",
    )
    attach.add_argument(
        "--ca-file",
        metavar="FILE",
        help="with --host wss://...: trust only the CA certificates in this PEM file (for a "
        "host with a certificate of its own making), instead of the system's",
    )
    attach.add_argument(
        "--exit-when-idle",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="a host attach starts exits after this long with no client and nothing running "
        "(default: 30)",
    )
    attach.add_argument(
        "--startup-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for a host attach started to listen (default: 30)",
    )
    add_endpoint_options(attach)
    add_verbose(attach)
    attach.add_argument(
        "agent_cmd",
        nargs=argparse.REMAINDER,
        metavar="-- AGENT_CMD",
        help="the agent command line for new sessions, after --",
    )
    attach.set_defaults(handler="acp_bridge.cli.attach_cmd:attach_command")
