"""Benchmarks of the built-in reference agent (``acp-bridge agent``), for docs/benchmarks.md.

Three figures, each measured in fresh processes with a blocking stdlib client (one line per
message over pipes, so the client costs next to nothing):

1. **initialize** -- from spawning ``python -m acp_bridge agent --mock-script ...`` to its
   ``initialize`` answer, and the ``initialize`` round trip alone on a started agent. litellm
   is imported in the background, so neither waits for it.
2. **first chunk** -- from sending ``session/prompt`` to reading the first
   ``agent_message_chunk``, on the scripted mock model (litellm's real streaming path): *cold*
   (the first prompt right after ``session/new``, which waits for litellm's import to finish)
   and *warm* (later prompts), also with ``--mock-response`` (litellm's own mock_response).
3. **import cost the core avoids** -- wall time, CPU time and peak RSS of a fresh interpreter
   that imports ``litellm`` (with ``LITELLM_LOCAL_MODEL_COST_MAP=True``, as the agent does)
   next to one that imports ``acp_bridge`` and one that runs ``acp-bridge --help``.

Run ``python -m scripts.bench.agent`` (``--runs N`` to change the repetitions). It prints a
Markdown table and the machine's load average (the machine may be shared: compare medians).
Needs the ``agent`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.common import ROOT

SCRIPT = {"replies": [], "default": {"say": "one two three four five six seven eight"}}
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


class Agent:
    """The agent over blocking pipes; ``call`` returns the answer and when the first line
    matching ``first`` (if given) arrived."""

    def __init__(self, *extra: str, scratch: Path) -> None:
        argv = [sys.executable, "-m", "acp_bridge", "agent", "--history", str(scratch / "h.db")]
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [*argv, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=ENV,
            cwd=scratch,
        )
        self.next_id = 0

    def call(
        self, method: str, params: dict[str, Any], first: bytes | None = None
    ) -> tuple[Any, float | None]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        first_at = None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the agent exited during {method}")
            if first is not None and first_at is None and first in line:
                first_at = time.perf_counter()
            if b'"id":' in line and b'"method"' not in line:
                answer = json.loads(line)
                if answer.get("id") == self.next_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer["result"], first_at

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def initialize_and_first_chunk(runs: int, warm_prompts: int) -> dict[str, list[float]]:
    keys = ("spawn", "rtt", "rtt_warm", "cold", "warm", "mock")
    figures: dict[str, list[float]] = {k: [] for k in keys}
    init = {"protocolVersion": 1, "clientCapabilities": {}}
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        script = scratch / "script.json"
        script.write_text(json.dumps(SCRIPT))
        for _ in range(runs):
            agent = Agent("--mock-script", str(script), scratch=scratch)
            agent.call("initialize", init)
            figures["spawn"].append(time.perf_counter() - agent.started)
            sent = time.perf_counter()
            agent.call("initialize", init)
            figures["rtt"].append(time.perf_counter() - sent)
            session = agent.call("session/new", {"cwd": str(scratch), "mcpServers": []})[0]
            prompt = {"sessionId": session["sessionId"], "prompt": [{"type": "text", "text": "hi"}]}
            for index in range(warm_prompts + 1):
                sent = time.perf_counter()
                _, first_at = agent.call("session/prompt", prompt, first=b"agent_message_chunk")
                assert first_at is not None
                figures["cold" if index == 0 else "warm"].append(first_at - sent)
            sent = time.perf_counter()
            agent.call("initialize", init)
            figures["rtt_warm"].append(time.perf_counter() - sent)
            agent.close()
        agent = Agent("--mock-response", "one two three four", scratch=scratch)
        agent.call("initialize", init)
        session = agent.call("session/new", {"cwd": str(scratch), "mcpServers": []})[0]
        prompt = {"sessionId": session["sessionId"], "prompt": [{"type": "text", "text": "hi"}]}
        for index in range(warm_prompts + 1):
            sent = time.perf_counter()
            _, first_at = agent.call("session/prompt", prompt, first=b"agent_message_chunk")
            assert first_at is not None
            if index:
                figures["mock"].append(first_at - sent)
        agent.close()
    return figures


_PROBE = """
import resource, sys, time
started = time.perf_counter(); cpu = time.process_time()
{body}
print(time.perf_counter() - started, time.process_time() - cpu,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, len(sys.modules))
"""


def import_cost(runs: int) -> dict[str, list[tuple[float, float, float, int]]]:
    bodies = {
        "import litellm": "import litellm",
        "import acp_bridge (+ its client API)": (
            "import acp_bridge; acp_bridge.open_supervised_agent"
        ),
        "acp-bridge --help (parser)": (
            "from acp_bridge.cli.main import build_parser; build_parser()"
        ),
    }
    results: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in bodies}
    for _ in range(runs):
        for name, body in bodies.items():
            out = subprocess.run(
                [sys.executable, "-c", _PROBE.format(body=body)],
                capture_output=True,
                text=True,
                env=ENV,
                check=True,
            ).stdout.split()
            results[name].append((float(out[0]), float(out[1]), float(out[2]), int(out[3])))
    return results


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:,.1f} ms"


def render(
    figures: dict[str, list[float]],
    imports: dict[str, list[tuple[float, float, float, int]]],
    runs: int,
    load_at_start: float,
) -> str:
    """The two Markdown tables, with the load averages at the start and now."""
    lines = [
        f"Load average at the start: {load_at_start:.2f}, at the end: {os.getloadavg()[0]:.2f} "
        f"({os.cpu_count()} cores, maybe shared). Medians of {runs} fresh agents / interpreters.",
        "",
        "| figure | median |",
        "|---|---:|",
    ]
    figure_rows = (
        (f"spawn -> `initialize` answered ({runs} fresh agents)", "spawn"),
        ("`initialize` round trip, started agent (litellm importing meanwhile)", "rtt"),
        ("`initialize` round trip, litellm loaded", "rtt_warm"),
        ("first chunk, cold (first prompt; waits for litellm's import)", "cold"),
        ("first chunk, warm, `--mock-script` (custom provider)", "warm"),
        ("first chunk, warm, `--mock-response` (litellm mock_response)", "mock"),
    )
    lines += [f"| {label} | {_ms(figures[key])} |" for label, key in figure_rows]
    lines += [
        "",
        "| fresh interpreter | wall | CPU | peak RSS | modules |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rows in imports.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        rss = statistics.median(r[2] for r in rows)
        modules = int(statistics.median(r[3] for r in rows))
        lines.append(
            f"| {name} | {wall * 1000:,.0f} ms | {cpu * 1000:,.0f} ms | {rss:,.0f} MB "
            f"| {modules:,} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh agents / interpreters (3)")
    parser.add_argument("--warm", type=int, default=10, help="warm prompts per agent (10)")
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    figures = initialize_and_first_chunk(args.runs, args.warm)
    imports = import_cost(args.runs)
    print(render(figures, imports, args.runs, load_at_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
