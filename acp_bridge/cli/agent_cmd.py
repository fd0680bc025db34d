"""``acp-bridge agent``: run the built-in reference agent on stdio (see :mod:`acp_bridge.agents`).

Errors before the protocol starts (the extra is missing, a bad mock script) are one line on
stderr and exit 2 or 3; nothing but protocol frames ever reaches stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from acp_bridge.cli.exit_codes import EXIT_AGENT_FAILED, EXIT_USAGE
from acp_bridge.cli.options import default_state_dir
from acp_bridge.version import agent_extra_install

__all__ = ["agent_command", "claim_stdout"]


def claim_stdout() -> int:
    """Take fd 1 for protocol frames: return a private duplicate of it, and send everything
    else written to fd 1 or ``sys.stdout`` to stderr from now on.

    litellm ``print()``s to stdout (an unknown provider's "Provider List", "Give Feedback / Get
    Help" on mapped exceptions), which would corrupt the ACP stream; so may any dependency, a C
    library or a child process. After this, all of them land on stderr.
    """
    sys.stdout.flush()
    frames = os.dup(1)
    os.set_inheritable(frames, False)  # tools' children must not write into the protocol
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return frames


def agent_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if importlib.util.find_spec("litellm") is None:
        print(
            "acp-bridge agent: litellm is not installed; install the agent extra with "
            + agent_extra_install(),
            file=sys.stderr,
        )
        return EXIT_AGENT_FAILED
    from acp_bridge.agents.config import DEFAULT_MODEL, AgentConfig
    from acp_bridge.agents.mock_script import MockScript, MockScriptError
    from acp_bridge.errors import UnsafeFileError
    from acp_bridge.safe_files import read_regular

    history = Path(args.history) if args.history else default_state_dir() / "agent-history.db"
    script = Path(args.mock_script).resolve() if args.mock_script else None
    if script is not None:
        try:  # a regular file only: a FIFO would block here until some writer came
            MockScript.parse(read_regular(str(script)).decode("utf-8"))
        except (OSError, UnicodeDecodeError, MockScriptError, UnsafeFileError) as exc:
            print(f"acp-bridge agent: bad --mock-script {script}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    config = AgentConfig(
        model=args.model or DEFAULT_MODEL,
        models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
        mock_response=args.mock_response,
        mock_script=script,
        history_path=history,
        max_turn_requests=args.max_turn_requests,
        max_rate_limit_retries=args.max_retries,
        retry_base_delay_s=args.retry_delay,
        default_mode=args.mode,
    )
    from acp_bridge.agents.server import serve

    frames = claim_stdout()  # before litellm can be imported
    try:
        return serve(config, frames)
    except OSError as exc:
        print(
            f"acp-bridge agent: cannot open the history {config.history_path}: {exc}",
            file=sys.stderr,
        )
        return EXIT_AGENT_FAILED
