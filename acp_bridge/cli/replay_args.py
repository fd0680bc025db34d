"""The ``replay`` subcommand's arguments (light: nothing here imports the library)."""

from __future__ import annotations

import argparse

from acp_bridge.cli.options import OneLineParser, byte_count

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    replay = commands.add_parser(
        "replay",
        help="serve a proxy recording (--record FILE) as a fake agent on stdio",
        usage="acp-bridge replay [OPTIONS] FILE",
        description=(
            "Act as an ACP agent on stdin/stdout that answers from a recording made with "
            "acp-bridge proxy --record FILE: each request is matched with the next recorded "
            "one by method and order and answered with the recorded updates and response (the "
            "live request's id). A client that diverges from the recording gets a JSON-RPC "
            "error naming what was expected, and replay exits 4. Use it to turn a real session "
            "into a regression test."
        ),
        epilog=(
            "Exit codes: 0 the client followed the recording (to its end, or closed early with "
            "--allow-partial); 4 the client diverged, or stopped before the end; 2 usage error "
            "(a recording that is unreadable, empty, or not one: not a regular file, a line "
            "that is not JSON, NaN, nesting over 200 deep, a line over 128 MiB, a file over "
            "--max-bytes)."
        ),
    )
    replay.add_argument("file", metavar="FILE", help="the recording (NDJSON from --record)")
    replay.add_argument(
        "--allow-partial",
        action="store_true",
        help="exit 0 when the client closes before the recording's end, and skip a cut last "
        "line (a recording whose writer died mid-line)",
    )
    replay.add_argument(
        "--max-bytes",
        type=byte_count,
        default=256 * 1024 * 1024,  # proxy.recording.DEFAULT_MAX_BYTES (the --help budget)
        metavar="N",
        help="the most of the file read, up to the agent's first exit (default: 256 MiB, the "
        "default of proxy --record-max-bytes)",
    )
    replay.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log to stderr (-vv for debug)",
    )
    replay.set_defaults(handler="acp_bridge.cli.replay_cmd:replay_command")
