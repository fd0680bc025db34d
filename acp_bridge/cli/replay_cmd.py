"""``acp-bridge replay FILE``: serve a ``proxy --record`` recording as an agent on stdio."""

from __future__ import annotations

import argparse
import os
import sys

import anyio

from acp_bridge.cli.exit_codes import EXIT_USAGE
from acp_bridge.proxy.replay import read_exchanges, serve_replay
from acp_bridge.proxy.script import RecordingError, ReplayScript
from acp_bridge.rpc.fdstream import FdReceiveStream, FdSendStream

__all__ = ["replay_command"]


def replay_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        exchanges = read_exchanges(
            args.file, allow_partial=args.allow_partial, max_bytes=args.max_bytes
        )
    except OSError as exc:
        print(f"acp-bridge replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except RecordingError as exc:
        print(f"acp-bridge replay: {args.file} is not a usable recording: {exc}", file=sys.stderr)
        return EXIT_USAGE
    script = ReplayScript(exchanges)
    backend = os.environ.get("ACP_BRIDGE_PROXY_BACKEND", "asyncio")
    code, problem = anyio.run(
        lambda: serve_replay(
            script, FdReceiveStream(0), FdSendStream(1), allow_partial=args.allow_partial
        ),
        backend=backend,
    )
    if problem is not None:
        print(f"acp-bridge replay: {args.file}: {problem}", file=sys.stderr)
    return code
