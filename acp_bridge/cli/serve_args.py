"""The ``serve`` subcommand's arguments. Light on purpose (``--help`` budget): nothing here
imports the library."""

from __future__ import annotations

import argparse

from acp_bridge.cli.named_agents import add_agent_options
from acp_bridge.cli.options import (
    OneLineParser,
    byte_count,
    count,
    positive_count,
    positive_seconds,
    seconds,
)

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="the conversation host: many clients on durable conversations, over a Unix socket "
        "(and WebSocket with --listen)",
        usage="acp-bridge serve [OPTIONS] [--agent NAME | -- AGENT_CMD [ARGS...]]",
        description=(
            "Own conversations and serve them to any number of clients. To each connection the "
            "host is an ACP agent (session/new, session/load to attach with the history "
            "replayed, session/prompt into the conversation's durable queue, ...), plus the "
            "host's own _acp_bridge/* methods for the shell verbs (send, watch, cancel, "
            "status). Each conversation's agent is supervised (restarts keep the session), "
            "stopped after --agent-idle and started again on next use. A kill of the host "
            "loses nothing: the next host resumes every conversation from the store. The "
            "socket is 0600 in a 0700 directory of yours. With --listen HOST:PORT the same is "
            "served over WebSocket at ws://HOST:PORT/acp (wss:// with --tls-cert/--tls-key) to "
            "clients that send the bearer token of --token-file; the URL (with the port bound, "
            "for HOST:0) and the token file's path are printed on stderr, never the token. "
            "Progress goes to stderr. See docs/host.md."
        ),
        epilog=(
            "Exit codes: 0 stopped by a signal, or idle for --exit-when-idle; 2 usage error "
            "(a bad option, a socket directory that is not yours, a host already serving the "
            "socket, a store that cannot be opened, a --listen address that cannot be bound, "
            "a bind beyond loopback without TLS or --insecure, a token file others can read, "
            "a TLS certificate or key that does not load)."
        ),
    )
    serve.add_argument(
        "--socket",
        metavar="PATH",
        help="the Unix socket to listen on (default: $XDG_RUNTIME_DIR/acp-bridge/host.sock, "
        "else <store>.host/host.sock beside the store)",
    )
    serve.add_argument(
        "--store",
        metavar="PATH|URL",
        help="the store of conversations: a SQLite path or a postgresql:// URL (default: "
        "$ACP_BRIDGE_STORE, else $XDG_STATE_HOME/acp-bridge/store.db)",
    )
    serve.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="also serve ACP over WebSocket at /acp on this address ([::1]:PORT for IPv6; "
        "port 0 picks a free one, printed on stderr); clients must send the bearer token",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --listen: the bearer token, made (0600) when the file is missing "
        "(default: <store>.token beside the store); copy it to the machines that attach",
    )
    serve.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="with --listen: the TLS certificate chain (PEM); serves wss://",
    )
    serve.add_argument(
        "--tls-key",
        metavar="FILE",
        help="with --listen: the TLS private key (PEM) of --tls-cert",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="with --listen: allow a bind beyond loopback without TLS (the token and every "
        "prompt cross the network in clear)",
    )
    serve.add_argument(
        "--agent-idle",
        type=positive_seconds,
        metavar="SECONDS",
        help="stop a conversation's agent after this long with nothing to do; the next use "
        "starts it again and restores its session (default: never)",
    )
    serve.add_argument(
        "--exit-when-idle",
        type=positive_seconds,
        metavar="SECONDS",
        help="exit 0 after this long with no client connected and no turn running or queued "
        "(attach starts its host with it)",
    )
    serve.add_argument(
        "--permission",
        choices=["deny", "allow-reads", "allow-all"],
        default="deny",
        help="how a permission request no attached client answers is answered (default: deny)",
    )
    serve.add_argument(
        "--grace",
        type=seconds,
        default=5.0,
        metavar="SECONDS",
        help="after a cancel, how long the agent gets to answer before it is replaced (default: 5)",
    )
    serve.add_argument(
        "--max-restarts",
        type=count,
        default=5,
        metavar="N",
        help="restarts allowed within 5 minutes before an agent is given up (default: 5)",
    )
    serve.add_argument(
        "--startup-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long an agent gets to answer initialize (default: 60)",
    )
    serve.add_argument(
        "--max-clients",
        type=positive_count,
        default=256,  # host.serve.DEFAULT_MAX_CLIENTS (not imported: the --help budget)
        metavar="N",
        help="connections served at once; one more is closed at once (default: 256)",
    )
    serve.add_argument(
        "--client-outbox-bytes",
        type=byte_count,
        default=64 * 1024 * 1024,  # host.clients.DEFAULT_OUTBOX_BYTES
        metavar="N",
        help="what may wait for one client; a client further behind is disconnected with a "
        "reason and may reattach from its cursor (default: 64 MiB)",
    )
    serve.add_argument(
        "--client-stall",
        type=positive_seconds,
        default=60.0,  # host.clients.DEFAULT_STALL_S
        metavar="SECONDS",
        help="a client that reads nothing for this long while output waits is disconnected "
        "(default: 60)",
    )
    serve.add_argument(
        "--max-in-flight",
        type=positive_count,
        default=128,
        metavar="N",
        help="requests served at once per connection (default: 128)",
    )
    serve.add_argument(
        "--allow-fs", action="store_true", help="let agents read/write files in their session roots"
    )
    serve.add_argument(
        "--allow-terminal", action="store_true", help="let agents run commands (terminal/*)"
    )
    serve.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log more (-vv for debug)",
    )
    add_agent_options(serve, mcp=False)  # --agent NAME, --config, --registry
    serve.add_argument(
        "agent_cmd",
        nargs=argparse.REMAINDER,
        metavar="-- AGENT_CMD [ARGS...]",
        help="the default agent for session/new, after -- (clients may name another with "
        "_meta.acpBridge.agent)",
    )
    serve.set_defaults(handler="acp_bridge.cli.serve_cmd:serve_command")
