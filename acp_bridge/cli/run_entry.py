"""``acp-bridge run``'s entry point: spawn the agent first, then import the library.

A new conversation's agent command is known from the arguments alone, so it is started before
the bridge imports its wire models and conversation layer (the bulk of a one-shot's fixed cost),
and the two start-ups overlap. This module imports only what the spawn needs. The process is
handed to :mod:`acp_bridge.cli.run`, which adopts it for the supervised agent's first generation;
if anything ends the run before that (a usage error, a busy conversation), it is killed here.

The import of :mod:`acp_bridge.cli.run` is lazy on purpose, and one-way: what both modules share
(the early agent's holder, the signals that came early) lives in :mod:`acp_bridge.cli.early_start`
and :mod:`acp_bridge.cli.early_signals`,
so ``run`` never imports this module.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path

from acp_bridge.cli.early_signals import (
    catch_early_signals,
    ignore_stopping_signals,
    interrupted_early,
    signals_held,
)
from acp_bridge.cli.early_start import EarlyAgent, interrupted_line
from acp_bridge.cli.exit_codes import EXIT_INTERRUPTED
from acp_bridge.cli.named_agents import ResolvedAgent, resolve_agent
from acp_bridge.cli.stdin_messages import check_messages
from acp_bridge.errors import SpawnError
from acp_bridge.process.early import spawn_early
from acp_bridge.process.spec import AgentSpec

__all__ = ["run_command"]


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    # --agent NAME or -- CMD (neither: continue a stored conversation's agent); a named agent's
    # default options apply to the ones not given on the command line.
    continuing = bool(args.resume or args.conversation)
    agent = resolve_agent(parser, args, sys.argv[1:], required=not continuing)
    if args.retry_failed and not continuing:
        parser.error("run: --retry-failed needs --resume or --conversation ID")
    check_messages(parser, args.message, args.max_message_bytes)  # usage errors spawn nothing
    catch_early_signals()
    early = None
    try:
        if interrupted_early():  # held since the program started: nothing is spawned yet
            raise KeyboardInterrupt
        early = None if continuing else _early_agent(args, agent)
        if early is not None:
            _spawn(early)
        if interrupted_early():  # it came during the spawn, which holds it back
            raise KeyboardInterrupt
        # Held during the import too: a KeyboardInterrupt raised inside an import surfaces as
        # whatever the code it hit makes of it (a RuntimeError from a dataclass's __set_name__,
        # a half-imported module), or is swallowed by a callback whose exceptions CPython only
        # reports. A signal that came meanwhile is acted upon here.
        with signals_held():
            run_resolved = _import_run()
        if interrupted_early():
            raise KeyboardInterrupt
        return run_resolved(parser, args, agent, early)
    except KeyboardInterrupt:  # before run's own watcher took over (it has its own words)
        ignore_stopping_signals()
        spawned = early is not None and early.popen is not None
        if early is not None:
            early.discard()
        print(interrupted_line(spawned), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        if early is not None:
            early.discard()


def _import_run() -> Callable[
    [argparse.ArgumentParser, argparse.Namespace, ResolvedAgent, EarlyAgent | None], int
]:
    """Import the library (the bulk of a one-shot's fixed cost) with the cyclic garbage
    collector paused, then freeze what was imported.

    The import allocates some 50,000 objects that live as long as the process; collecting while
    they pile up rescans them dozens of times for nothing (about 5% of the import), and frozen
    they are never scanned again: not by the collections of the run, nor by the full collection
    at interpreter exit (some 30 ms of a one-shot's exit otherwise). The price: the few cycles
    the import leaves as garbage (about 700 objects, 160 KiB) are frozen too instead of freed,
    once per process; collecting them first would cost a full collection.
    """
    gc.disable()
    try:
        from acp_bridge.cli.run import run_resolved
    finally:
        gc.freeze()
        gc.enable()
    _without_pydantic_plugins()
    return run_resolved


def _without_pydantic_plugins() -> None:
    """``run`` loads no pydantic plugins. Finding them scans the metadata of every installed
    package when the first model is built (20-25 ms of a one-shot here), and the bridge's own
    models need none. Done by settling pydantic's plugin cache empty, for this process only;
    not with ``PYDANTIC_DISABLE_PLUGINS``, which the agent and its terminals would inherit. A
    pydantic without that cache, or a user who set the variable, is left as it is."""
    try:
        from pydantic.plugin import _loader
    except ImportError:
        return
    if getattr(_loader, "_plugins", ()) is None and "PYDANTIC_DISABLE_PLUGINS" not in os.environ:
        _loader._plugins = {}


def _early_agent(args: argparse.Namespace, agent: ResolvedAgent) -> EarlyAgent | None:
    """The holder of a new conversation's agent, to be spawned now; None if that can't be done
    early (the normal path then spawns it, and reports a failure in its own words)."""
    if not agent.argv or (args.cwd is not None and not os.path.isdir(args.cwd)):
        return None
    cwd = Path(args.cwd).resolve() if args.cwd else Path.cwd()
    return EarlyAgent(
        AgentSpec(list(agent.argv), name=agent.name or "", cwd=cwd, env=agent.env), None
    )


def _spawn(early: EarlyAgent) -> None:
    """Spawn ``early``'s agent, with signals held back until its holder has it (see
    :func:`~acp_bridge.cli.early_signals.signals_held`)."""
    with signals_held(), contextlib.suppress(SpawnError):
        early.popen = spawn_early(early.spec, os.environ)
