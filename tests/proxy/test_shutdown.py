"""Editor EOF, SIGTERM or SIGINT: the proxy stops the whole agent tree and exits 0."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import psutil
import pytest

from tests.process.liveness import open_liveness
from tests.proxy.harness import agent, open_editor, prompt_params, proxy

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("how", "anyio_backend"),
    [("eof", "asyncio"), ("eof", "trio"), ("sigterm", "asyncio"), ("sigint", "trio")],
)
async def test_shutdown_leaves_no_orphans(how: str) -> None:
    async with open_liveness() as liveness:
        agent_argv = agent("forking_agent.py", "--connect-back", str(liveness.port), "--quiet")
        async with open_editor(proxy(agent_argv=agent_argv)) as editor:
            peers = await liveness.accept(2)  # the agent and its grandchild
            session_id = await editor.handshake()
            await editor.call("session/prompt", prompt_params(session_id, "hi"))
            tree = psutil.Process(editor.process.pid).children(recursive=True)
            assert {p.pid for p in tree} >= {peer.pid for peer in peers}
            if how == "eof":
                code = await editor.close_and_wait()
            else:
                editor.process.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
                code = await editor.close_and_wait()
            assert code == 0
            await liveness.assert_closed(*peers)
            assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_eof_during_a_restart_stops_at_once(tmp_path: Path) -> None:
    # The restarted agent never answers its session/load (the restore would wait for the
    # 60 s startup timeout): the editor's EOF must not wait for it.
    async with open_liveness() as liveness:
        flags = ["--quiet", "--history", str(tmp_path / "h.json"), "--hang-on", "session/load"]
        flags += ["--crash-once-file", str(tmp_path / "crashed")]
        flags += ["--connect-back", str(liveness.port)]
        async with open_editor(proxy(agent_argv=agent("echo_agent.py", *flags))) as editor:
            await liveness.accept(1)
            session_id = await editor.handshake()
            await editor.request("session/prompt", prompt_params(session_id, "crash 3"))
            await liveness.accept(1)  # the restarted agent is up: the restore is hanging
            await editor.request("session/list", {})  # waits for the restore
            with anyio.fail_after(5):
                assert await editor.close_and_wait() == 0
