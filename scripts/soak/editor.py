"""The soak's editor: a small ACP client (stdlib, asyncio) driving one long-lived
``acp-bridge proxy`` for the whole soak while its agent is killed under it.

It initializes, opens a session, and until the soak's deadline prompts (tagged ``P<n>Z``)
programs that stream, flood, wait, hang (ignoring cancel), write stderr or ask permission; it
cancels some, sends two prompts back to back (the proxy queues the second), and kills the
agent (SIGKILL, SIGTERM; the proxy's child, found with psutil) mid-turn. Every request must be
answered within :data:`ANSWER_S`; a prompt cut by a kill must be answered with an error whose
``data.recoverable`` is true. After each answered prompt it samples the proxy's fd count and
RSS. At the end it closes the proxy's stdin: the proxy must exit 0 with no agent left.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
from typing import Any

import psutil

from scripts.soak.state import Soak

ANSWER_S = 60.0
ACTIONS = [("plain", 3), ("flood", 2), ("cancel", 2), ("stubborn cancel", 1), ("kill", 2),
           ("two prompts", 1), ("permission", 1)]  # fmt: skip
REPLACING = ("kill", "stubborn cancel")
"""Actions that end the agent process (a kill; a stubborn turn's quarantine)."""
UPTIME_RESET_S = 65.0
"""The proxy's restart backoff doubles up to 30 s and resets after 60 s of uptime: agent
replacements closer together than this would make every later restart wait up to 30 s."""
PLAIN = ["echo {t}", "echo {t}; burst 2000", "echo {t}; stderr 1", "echo {t}; noise 3",
         "echo {t}; late 200", "echo {t}; tool in_progress"]  # fmt: skip


class Editor:
    def __init__(self, soak: Soak, proc: asyncio.subprocess.Process) -> None:
        self.soak = soak
        self.proc = proc
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.previous = "none"
        """The action before this one (an agent killed there may die during this one)."""

    async def read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            message = json.loads(line)
            if "method" in message and "id" in message:
                await self.answer_agent_request(message)
            elif "method" in message:
                self.soak.ledger.counts["proxy notifications"] += 1
            elif message.get("id") in self.waiting:
                self.waiting.pop(message["id"]).set_result(message)
            else:
                self.soak.ledger.violate(
                    f"proxy: a response for no request of ours: {line[:300]!r}"
                )
        for future in self.waiting.values():
            future.cancel()

    async def answer_agent_request(self, request: dict[str, Any]) -> None:
        self.soak.ledger.counts[f"proxy agent request {request['method']}"] += 1
        if request["method"] == "session/request_permission":
            options = request["params"]["options"]
            allow = [o for o in options if o["kind"] == "allow_once"] or options
            result: dict[str, Any] = {
                "outcome": {"outcome": "selected", "optionId": allow[0]["optionId"]}
            }
            await self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})
        else:
            error = {"code": -32601, "message": "not offered by the soak's editor"}
            await self.send({"jsonrpc": "2.0", "id": request["id"], "error": error})

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()

    async def request(self, method: str, params: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        self.next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return future

    async def answered(
        self, future: asyncio.Future[dict[str, Any]], what: str
    ) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(asyncio.shield(future), ANSWER_S)
        except TimeoutError:
            self.soak.ledger.violate(f"proxy: {what} not answered within {ANSWER_S:.0f} s")
            return None

    def agent_child(self) -> psutil.Process | None:
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.Error:
            return None
        return children[0] if children else None

    def sample(self) -> None:
        try:
            proxy = psutil.Process(self.proc.pid)
            self.soak.ledger.proxy_fds.append(proxy.num_fds())
            self.soak.ledger.proxy_rss_mib.append(round(proxy.memory_info().rss / 2**20, 2))
        except psutil.Error:
            pass


async def editor_loop(soak: Soak) -> None:
    rng = random.Random(soak.seed * 1000 + 999)
    agent = [sys.executable, "-u", str(soak.soak_agent), str(soak.prompt_log), "echo_agent.py",
             "--quiet", "--history", str(soak.workdir / "history-proxy.json")]  # fmt: skip
    argv = [sys.executable, "-m", "acp_bridge", "proxy", "--grace", "1", "--max-restarts",
            "100000", "--startup-timeout", "30", "--", *agent]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=soak.env, cwd=soak.workdir,
        start_new_session=True, limit=64 * 2**20,
    )  # fmt: skip
    soak.live.add(proc)
    editor = Editor(soak, proc)
    reader = asyncio.create_task(editor.read())
    ledger = soak.ledger
    try:
        hello = {"protocolVersion": 1, "clientInfo": {"name": "soak-editor", "version": "1"},
                 "clientCapabilities": {}}  # fmt: skip
        init = await editor.answered(await editor.request("initialize", hello), "initialize")
        params = {"cwd": str(soak.workdir), "mcpServers": []}
        new = await editor.answered(await editor.request("session/new", params), "session/new")
        if not init or not new or "result" not in new:
            ledger.violate(f"proxy: no session ({init}, {new})")
            return
        session = new["result"]["sessionId"]
        loop = asyncio.get_running_loop()
        replaced_at = -UPTIME_RESET_S
        editor.sample()
        while not soak.over():
            action = pick_action(rng)
            if action in REPLACING:
                if loop.time() - replaced_at < UPTIME_RESET_S:
                    action = "flood"
                else:
                    replaced_at = loop.time()
            await one_action(editor, session, action, rng)
    finally:
        await close_proxy(soak, editor, reader)


def pick_action(rng: random.Random) -> str:
    return rng.choices([a for a, _ in ACTIONS], [w for _, w in ACTIONS])[0]


async def one_action(editor: Editor, session: str, action: str, rng: random.Random) -> None:
    soak, ledger = editor.soak, editor.soak.ledger

    def prompt(text: str) -> dict[str, Any]:
        return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}

    tag = soak.tag("P")
    text = {
        "plain": rng.choice(PLAIN), "flood": "echo {t}; flood 20000", "cancel": "echo {t}; wait 5",
        "stubborn cancel": "echo {t}; hang", "kill": "echo {t}; wait 3",
        "two prompts": "echo {t}; wait 0.3", "permission": "echo {t}; permission",
    }[action].format(t=tag)  # fmt: skip
    future = await editor.request("session/prompt", prompt(text))
    second = None
    if action == "two prompts":
        second = await editor.request("session/prompt", prompt(f"echo {soak.tag('P')}"))
    if action in ("cancel", "stubborn cancel", "kill"):
        await asyncio.sleep(rng.uniform(0.1, 0.8))
    if action in ("cancel", "stubborn cancel"):
        await editor.send(
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}
        )
    killed = False
    if action == "kill" and (child := editor.agent_child()) is not None:
        try:
            child.send_signal(rng.choice((signal.SIGKILL, signal.SIGTERM)))
            killed = True
        except psutil.Error:
            pass
    answer = await editor.answered(future, f"prompt {tag} ({action})")
    if second is not None:
        await editor.answered(second, "the queued second prompt")
    ledger.counts[f"proxy {action}"] += 1
    if answer is None:
        return
    previous, editor.previous = editor.previous, action
    if "error" in answer:
        judge_error(editor, answer["error"], action, previous, killed)
        return
    reason = answer["result"].get("stopReason")
    ledger.counts[f"proxy stopReason {reason}"] += 1
    if action == "stubborn cancel" and reason != "cancelled":
        ledger.violate(f"proxy: a stubborn turn's cancel answered {reason}")
    editor.sample()


def judge_error(
    editor: Editor, error: dict[str, Any], action: str, previous: str, killed: bool
) -> None:
    ledger = editor.soak.ledger
    data = error.get("data") or {}
    ledger.counts["proxy prompt errors"] += 1
    if error.get("code") == -32600 and "already in progress" in str(error.get("message")):
        # The fixture agent refuses a prompt while its previous turn is still registered (it
        # sends late updates after its answer, or the cancelled turn's thread is finishing).
        # The proxy forwards the agent's answer as it is: the agent's business.
        ledger.counts[f"proxy prompt refused busy by the agent (after {previous})"] += 1
    elif (killed or previous == "kill") and data.get("recoverable") is True:
        ledger.counts["proxy crash answered recoverable"] += 1
    elif killed or previous == "kill":
        ledger.violate(f"proxy: a killed agent's prompt not recoverable: {error}")
    else:
        ledger.violate(f"proxy: {action} prompt (after {previous}) failed without a kill: {error}")


async def close_proxy(soak: Soak, editor: Editor, reader: asyncio.Task[None]) -> None:
    """The editor closes stdin: the proxy must exit 0 and take its agent with it."""
    proc = editor.proc
    agent = editor.agent_child()
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        code = await asyncio.wait_for(proc.wait(), 30)
        if code != 0:
            soak.ledger.violate(f"proxy exited {code} after the editor closed stdin")
    except TimeoutError:
        soak.ledger.violate("proxy still running 30 s after the editor closed stdin")
        proc.kill()
        await proc.wait()
    soak.live.discard(proc)
    await asyncio.gather(reader, return_exceptions=True)
    if agent is not None:
        try:
            if agent.is_running() and agent.status() != psutil.STATUS_ZOMBIE:
                soak.ledger.violate(f"orphan: the proxy's agent pid {agent.pid} outlived the proxy")
        except psutil.Error:
            pass
