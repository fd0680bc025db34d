"""The ``proxy`` subcommand's arguments. Light on purpose (``--help`` budget): nothing here
imports the library."""

from __future__ import annotations

import argparse

from acp_bridge.cli.named_agents import add_agent_options
from acp_bridge.cli.options import (
    OneLineParser,
    byte_count,
    count,
    directory,
    positive_count,
    positive_seconds,
    seconds,
)

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    proxy = commands.add_parser(
        "proxy",
        help="stdio proxy for editors: restarts, prompt queueing, cancel grace, recording",
        usage="acp-bridge proxy [OPTIONS] -- AGENT_CMD [ARGS...]",
        description=(
            "Configure this as the agent command in your editor. It starts AGENT_CMD and "
            "relays ACP between the editor (our stdin/stdout) and the agent unchanged, adding: "
            "a restart that keeps the editor's sessions when the agent crashes, a FIFO for a "
            "second prompt sent while a turn runs, a cancel grace window after which the "
            "proxy answers 'cancelled' itself and replaces the agent, and a traffic recording. "
            "stdout carries protocol messages only; logs go to stderr or --log. See "
            "docs/proxy.md."
        ),
        epilog=(
            "Exit codes: 0 the editor closed the connection or a signal stopped the proxy; "
            "3 the agent could not be started, or is gone for good (restart limit reached); "
            "2 usage error."
        ),
    )
    proxy.add_argument(
        "--grace",
        type=seconds,
        default=5.0,
        metavar="SECONDS",
        help="after the editor's cancel, how long the agent gets to answer before the proxy "
        "answers 'cancelled' and replaces it (default: 5)",
    )
    proxy.add_argument(
        "--no-queue",
        action="store_true",
        help="pass a prompt for a busy session straight to the agent instead of holding it",
    )
    proxy.add_argument(
        "--max-restarts",
        type=count,
        default=5,
        metavar="N",
        help="restarts allowed within 5 minutes before giving up (default: 5)",
    )
    proxy.add_argument(
        "--startup-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long a restarted agent gets to answer initialize (default: 60)",
    )
    proxy.add_argument(
        "--restore-timeout",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long each session's restore may take after a restart; a session over it is "
        "reported lost (default: 60)",
    )
    proxy.add_argument(
        "--restore-concurrency",
        type=positive_count,
        default=8,  # core.restore_plan.DEFAULT_CONCURRENCY (not imported: the --help budget)
        metavar="N",
        help="sessions restored at once after a restart (default: 8); a session with a prompt "
        "waiting goes first",
    )
    proxy.add_argument(
        "--max-in-flight",
        type=positive_count,
        default=4096,  # proxy.routing.MAX_IN_FLIGHT (not imported: the --help budget)
        metavar="N",
        help="requests in flight each way between the editor and the agent; past it a request "
        "is answered with an error at once (default: 4096)",
    )
    proxy.add_argument(
        "--record",
        metavar="FILE",
        help="append every message, with time and direction, to FILE as NDJSON (a regular "
        "file, created 0600; replay it with acp-bridge replay FILE). A failed write stops the "
        "recording, never the proxy",
    )
    proxy.add_argument(
        "--record-max-bytes",
        type=byte_count,
        default=256 * 1024 * 1024,  # proxy.recording.DEFAULT_MAX_BYTES (the --help budget)
        metavar="N",
        help="with --record: the file never grows past N bytes; at the cap the recording stops "
        "and says so in its last line (default: 256 MiB; at least 4096)",
    )
    proxy.add_argument(
        "--redact",
        action="store_true",
        help="with --record: mask secrets in the file (any value under a key naming a token, "
        "secret, password, key or credential; env and header values; token-shaped strings)",
    )
    proxy.add_argument("--log", metavar="FILE", help="write logs to FILE instead of stderr")
    proxy.add_argument(
        "--cwd",
        type=directory,
        metavar="DIR",
        help="the agent process's working directory (default: the proxy's)",
    )
    proxy.add_argument(
        "--max-message-bytes",
        type=byte_count,
        default=64 * 1024 * 1024,
        metavar="N",
        help="the longest line accepted from either side (default: 64 MiB)",
    )
    proxy.add_argument(
        "--max-buffer-bytes",
        type=byte_count,
        default=32 * 1024 * 1024,  # rpc.framing.DEFAULT_MAX_QUEUED_BYTES (the --help budget)
        metavar="N",
        help="bytes read from one side that may wait for the other, per direction; at the "
        "bound the proxy stops reading the side that is ahead (one line always passes), and "
        "prompts queued behind running turns past it are refused (default: 32 MiB)",
    )
    proxy.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log more (-vv for debug)",
    )
    add_agent_options(proxy, mcp=False)  # --agent NAME, --config, --registry
    proxy.add_argument(
        "agent_cmd",
        nargs=argparse.REMAINDER,
        metavar="-- AGENT_CMD [ARGS...]",
        help="the agent command line, after --",
    )
    proxy.set_defaults(handler="acp_bridge.cli.proxy_cmd:proxy_command")
