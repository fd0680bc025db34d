"""The client paths of the interop matrix (its columns), and running one cell.

Every path runs the same scenario against an agent and returns the same verdicts: ``initialize``,
``session/new``, ``stream`` (a prompt whose answer streams the expected text, ``end_turn``),
``cancel`` (a long prompt cancelled after its first chunk, or after 1 s of silence, must end
``cancelled``), ``restart`` (the agent under the bridge is SIGKILLed between turns; the next
prompt on the same session must stream: the bridge restarted the agent and restored the
session) and ``load`` (a second process ``session/load``s the first one's session, then a
prompt on it streams again). The client paths in tests/interop/ print them as one JSON line;
the CLI path reads ``acp-bridge run --json`` events.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interop_peers import HELLO, ROOT, Agent

CHECK_NAMES = ("initialize", "session/new", "stream", "cancel", "restart", "load")
INTEROP = ROOT / "tests" / "interop"
STDERR_TAIL = 600
"""Characters of a failed cell's stderr kept in the JSON results."""


@dataclass(frozen=True)
class ClientPath:
    name: str
    what: str
    needs_node: bool = False
    through_proxy: bool = False
    client: str = ""
    quick: bool = False
    restarts: bool = False
    """The bridge in this path restarts a dead agent (the library and the proxy do)."""
    """``python:SCRIPT`` or ``node:SCRIPT`` under tests/interop, or ``cli``."""


PATHS = [
    ClientPath("cli", "`acp-bridge run --json` (our CLI)", client="cli", quick=True),
    ClientPath(
        "library",
        "our library: open_supervised_agent, open_conversation",
        client="python:bridge_client.py",
        restarts=True,
    ),
    ClientPath("py-sdk", "official Python SDK client, direct", client="python:sdk_client.py"),
    ClientPath(
        "py-sdk+proxy",
        "official Python SDK client through `acp-bridge proxy`",
        through_proxy=True,
        client="python:sdk_client.py",
        quick=True,
        restarts=True,
    ),
    ClientPath(
        "ts-sdk",
        "official TypeScript SDK client, direct",
        needs_node=True,
        client="node:node/matrix_client.mjs",
    ),
    ClientPath(
        "ts-sdk+proxy",
        "official TypeScript SDK client through `acp-bridge proxy`",
        needs_node=True,
        through_proxy=True,
        client="node:node/matrix_client.mjs",
        quick=True,
        restarts=True,
    ),
]


def offline_env() -> dict[str, str]:
    """Our environment without provider keys (nothing may reach a model), acp_bridge importable."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_AUTH_TOKEN"))}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    return env


def proxy_argv(agent_argv: list[str], workdir: Path) -> list[str]:
    log = str(workdir / "proxy.log")
    return [sys.executable, "-m", "acp_bridge", "proxy", "--log", log, "--", *agent_argv]


def run_cell(agent: Agent, path: ClientPath, workdir: Path) -> dict[str, Any]:
    """Run one cell; its verdicts, what was not checked and why, and its stderr tail."""
    workdir.mkdir(parents=True, exist_ok=True)
    agent_argv = agent.argv(workdir)
    if path.through_proxy:
        agent_argv = proxy_argv(agent_argv, workdir)
    started = time.monotonic()
    if path.client == "cli":
        checks, info, stderr = cli_scenario(agent, agent_argv, workdir)
    else:
        checks, info, stderr = script_scenario(agent, path, agent_argv, workdir)
    not_checked: dict[str, str] = {}
    if agent.slow is None:
        not_checked["cancel"] = "the agent has no turn long enough to cancel"
    if not agent.loads:
        not_checked["load"] = "the agent offers no session/load (loadSession false)"
        not_checked["restart"] = (
            "the agent can neither load nor resume a session, so no restart can keep it"
            " (the proxy then answers -32002 'session lost', as docs/proxy.md says)"
        )
    elif path.client == "cli":
        not_checked["restart"] = "not automated on the CLI path (run restarts through the library)"
    elif not path.restarts:
        not_checked["restart"] = "a bare SDK client does not restart agents (the proxy adds that)"
    for name in CHECK_NAMES:
        if name not in checks and name not in not_checked:
            not_checked[name] = "not reached: an earlier step failed"
    failed = {n: c["detail"] for n, c in checks.items() if not c["ok"]}
    return {
        "agent": agent.name,
        "path": path.name,
        "status": "fail" if failed else "pass",
        "checks": checks,
        "not_checked": not_checked,
        "reasons": failed,
        "info": info,
        "seconds": round(time.monotonic() - started, 1),
        "stderr_tail": stderr[-STDERR_TAIL:] if failed else "",
    }


def script_scenario(
    agent: Agent, path: ClientPath, agent_argv: list[str], workdir: Path
) -> tuple[dict[str, Any], dict[str, Any], str]:
    kind, script = path.client.split(":", 1)
    runner = [sys.executable] if kind == "python" else ["node"]
    scenario = {
        "hello": HELLO,
        "expect": agent.expect,
        "slow": agent.slow,
        "load": agent.loads,
        "restart": agent.loads and path.restarts,
        "cwd": str(workdir),
        "timeout": agent.step_timeout,
    }
    argv = [*runner, str(INTEROP / script), json.dumps(scenario), "--", *agent_argv]
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=workdir,
            env=offline_env(),
            timeout=agent.step_timeout * 8,
        )
    except subprocess.TimeoutExpired as expired:
        stderr = (
            (expired.stderr or b"").decode(errors="replace")
            if isinstance(expired.stderr, bytes)
            else (expired.stderr or "")
        )
        return (
            {
                "initialize": verdict(
                    False, f"the client did not finish within {agent.step_timeout * 8:.0f} s"
                )
            },
            {},
            stderr,
        )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        detail = f"the client exited {result.returncode} without a verdict"
        return {"initialize": verdict(False, detail)}, {}, result.stderr
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed["checks"], parsed.get("info", {}), result.stderr


def verdict(ok: bool, detail: str) -> dict[str, Any]:
    return {"ok": ok, "detail": detail[:400]}


# -- the CLI path: acp-bridge run --json --------------------------------------------------------


def run_json(workdir: Path, store: str, timeout: float, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "acp_bridge",
        "run",
        "--json",
        "--cwd",
        str(workdir),
        "--store",
        str(workdir / store),
        "--startup-timeout",
        str(timeout),
        *args,
    ]


def events_of(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def chunks_of(events: list[dict[str, Any]]) -> str:
    parts = []
    for event in events:
        update = event.get("update") or {}
        if event.get("event") == "update" and update.get("sessionUpdate") == "agent_message_chunk":
            parts.append((update.get("content") or {}).get("text") or "")
    return "".join(parts)


def judge_turn(events: list[dict[str, Any]], expect: str, code: int) -> dict[str, Any]:
    ended = [e for e in events if e.get("event") in ("turn_ended", "turn_failed")]
    text = chunks_of(events)
    if not ended:
        return verdict(False, f"no turn_ended event (exit {code})")
    last = ended[-1]
    ok = last.get("state") == "done" and expect in text and code == 0
    detail = f"{last.get('stopReason')} / {last.get('state')}, exit {code}: {text[:120]!r}"
    if last.get("event") == "turn_failed":
        detail = f"turn_failed {json.dumps(last.get('error'))[:200]}, exit {code}"
    return verdict(ok, detail if ok else f"expected {expect!r}; {detail}")


def cli_scenario(
    agent: Agent, agent_argv: list[str], workdir: Path
) -> tuple[dict[str, Any], dict[str, Any], str]:
    checks: dict[str, Any] = {}
    timeout = agent.step_timeout
    argv = run_json(workdir, "store.db", timeout, "-m", HELLO, "--", *agent_argv)
    result = subprocess.run(
        argv, capture_output=True, text=True, cwd=workdir, env=offline_env(), timeout=timeout * 4
    )
    stderr = result.stderr
    events = events_of(result.stdout)
    started = [e for e in events if e.get("event") == "agent_started"]
    if not started:
        checks["initialize"] = verdict(
            False, f"no agent_started event, exit {result.returncode}: {stderr.strip()[-200:]}"
        )
        return checks, {}, stderr
    info = {"agentInfo": started[0].get("agentInfo")}
    checks["initialize"] = verdict(True, f"protocol {started[0].get('protocolVersion')}")
    session = next((e for e in events if e.get("event") == "session"), None)
    if session is None or session.get("how") != "new":
        checks["session/new"] = verdict(False, f"session event {session}, exit {result.returncode}")
        return checks, info, stderr
    checks["session/new"] = verdict(True, str(session.get("sessionId")))
    checks["stream"] = judge_turn(events, agent.expect, result.returncode)
    if agent.slow:
        checks["cancel"], cancel_err = cli_cancel(agent, agent_argv, workdir)
        stderr += cancel_err
    if agent.loads:
        argv = run_json(workdir, "store.db", timeout, "--resume", "-m", HELLO, "--", *agent_argv)
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            cwd=workdir,
            env=offline_env(),
            timeout=timeout * 4,
        )
        stderr += result.stderr
        events = events_of(result.stdout)
        session = next((e for e in events if e.get("event") == "session"), {})
        turn = judge_turn(events, agent.expect, result.returncode)
        how = session.get("how")
        turn["detail"] = f"new run --resume, session {how}; then {turn['detail']}"
        turn["ok"] = turn["ok"] and how == "load"
        checks["load"] = turn
    return checks, info, stderr


def cli_cancel(agent: Agent, agent_argv: list[str], workdir: Path) -> tuple[dict[str, Any], str]:
    """``run -m SLOW``, SIGINT after the first chunk (or 1 s after turn_started): exit 130 and
    the turn recorded cancelled."""
    assert agent.slow is not None
    argv = run_json(workdir, "cancel.db", agent.step_timeout, "-m", agent.slow, "--", *agent_argv)
    err_path = workdir / "cli-cancel.stderr"
    with err_path.open("w") as err:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, text=True, cwd=workdir, env=offline_env()
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + agent.step_timeout * 2
        turn_started_at: float | None = None
        while True:
            wait = deadline - time.monotonic()
            if turn_started_at is not None:
                wait = min(wait, turn_started_at + 1.0 - time.monotonic())
            try:
                line = lines.get(timeout=max(0.0, wait))
            except queue.Empty:
                if turn_started_at is None:
                    process.kill()
                    process.wait()
                    return verdict(False, "the turn did not start in time"), err_path.read_text()
                break  # silent for 1 s after turn_started: cancel now
            if line is None:
                break
            events += events_of(line)
            kind = events[-1].get("event") if events else None
            if kind == "turn_started":
                turn_started_at = time.monotonic()
            elif kind == "update" and turn_started_at is not None:
                break
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=agent.step_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return verdict(
                False, f"run did not exit within {agent.step_timeout} s of SIGINT"
            ), err_path.read_text()
    while (line := lines.get(timeout=5)) is not None:
        events += events_of(line)
    ended = [e for e in events if e.get("event") in ("turn_ended", "turn_failed")]
    state = ended[-1].get("state") if ended else None
    ok = code == 130 and state == "cancelled"
    return verdict(
        ok, f"SIGINT: exit {code}, turn {state}, {len(chunks_of(events))} chars streamed"
    ), err_path.read_text()
